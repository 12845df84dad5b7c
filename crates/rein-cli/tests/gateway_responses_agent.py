"""An `openai-agents` agent with one function tool against `rein serve`.

Run by crates/rein-cli/tests/gateway_responses.rs with REIN_GATEWAY_URL
(the server's base URL, ending in /v1) and REIN_API_KEY. The agent names
no model and no model settings: it asks for the SDK's default model with
the SDK's default settings, over the Responses API, and the server has a
binding by that name. Only the client's base URL differs from a plain
OpenAI setup. The agent runs twice, whole and streamed; prints one JSON
line per run.
"""

import asyncio
import json
import os
import sys

from agents import (
    Agent,
    Runner,
    function_tool,
    set_default_openai_api,
    set_default_openai_client,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

CALLS = []


@function_tool
def get_order(order_id: str) -> str:
    """Looks up an order's status by its id."""
    CALLS.append(order_id)
    return json.dumps({"order_id": order_id, "status": "shipped"})


async def main() -> int:
    client = AsyncOpenAI(
        base_url=os.environ["REIN_GATEWAY_URL"],
        api_key=os.environ["REIN_API_KEY"],
        max_retries=0,
    )
    set_default_openai_client(client, use_for_tracing=False)
    set_default_openai_api("responses")
    set_tracing_disabled(True)
    agent = Agent(
        name="order desk",
        instructions="Answer questions about orders; look them up first.",
        tools=[get_order],
    )

    result = await Runner.run(agent, "Where is order A-1001?")
    print(json.dumps({
        "check": "run",
        "final_output": result.final_output,
        "calls": list(CALLS),
        "responses": len(result.raw_responses),
        "items": [item.type for item in result.new_items],
    }), flush=True)

    CALLS.clear()
    streamed = Runner.run_streamed(agent, "Where is order A-1002?")
    deltas = []
    async for event in streamed.stream_events():
        if event.type == "raw_response_event" and event.data.type == "response.output_text.delta":
            deltas.append(event.data.delta)
    print(json.dumps({
        "check": "run_streamed",
        "final_output": streamed.final_output,
        "deltas": "".join(deltas),
        "calls": list(CALLS),
        "items": [item.type for item in streamed.new_items],
    }), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
