"""The official `openai` package's Responses API against `rein serve`.

Run by crates/rein-cli/tests/gateway_responses.rs with REIN_GATEWAY_URL
(the server's base URL, ending in /v1), REIN_API_KEY and REIN_MODEL (a
[models.*] binding). Only the base URL differs from a plain OpenAI setup.
Every answer is also validated strictly against the SDK's own pydantic
types (the SDK itself parses leniently, so a missing member would pass
unnoticed). Prints one JSON line per check; exits non-zero on the first
failure.
"""

import json
import os
import sys

from openai import BadRequestError, OpenAI
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

STREAM_EVENT = TypeAdapter(ResponseStreamEvent)


def emit(check: str, **fields) -> None:
    print(json.dumps({"check": check, **fields}), flush=True)


def main() -> int:
    client = OpenAI(
        base_url=os.environ["REIN_GATEWAY_URL"],
        api_key=os.environ["REIN_API_KEY"],
        max_retries=0,
    )
    model = os.environ["REIN_MODEL"]

    # 1. A response, whole.
    raw = client.responses.with_raw_response.create(
        model=model,
        instructions="Be brief.",
        input="Say hello.",
        metadata={"ticket": "T-1"},
    )
    response = raw.parse()
    strict = Response.model_validate(json.loads(raw.text))
    emit(
        "create",
        text=response.output_text,
        strict_text=strict.output_text,
        id=response.id,
        status=response.status,
        model=response.model,
        metadata=response.metadata,
        total_tokens=response.usage.total_tokens if response.usage else None,
        rein_model=raw.headers.get("rein-model"),
        rein_fallback=raw.headers.get("rein-fallback"),
    )

    # 2. The same, streamed: every event validated, the text from the deltas.
    stream = client.responses.create(
        model=model,
        input=[{"role": "user", "content": "Stream a greeting."}],
        stream=True,
    )
    types = []
    pieces = []
    final = None
    for event in stream:
        STREAM_EVENT.validate_python(event.to_dict())
        types.append(event.type)
        if event.type == "response.output_text.delta":
            pieces.append(event.delta)
        if event.type == "response.completed":
            final = event.response
    emit(
        "stream",
        text="".join(pieces),
        types=types,
        final_text=final.output_text if final else None,
        final_status=final.status if final else None,
        total_tokens=final.usage.total_tokens if final and final.usage else None,
    )

    # 3. A function tool round trip: the call, then its output.
    tools = [{
        "type": "function",
        "name": "get_order",
        "description": "Looks up an order.",
        "parameters": {
            "type": "object",
            "properties": {"order_id": {"type": "string"}},
            "required": ["order_id"],
            "additionalProperties": False,
        },
        "strict": True,
    }]
    conversation = [{"role": "user", "content": "Where is order A-1001?"}]
    called = client.responses.create(model=model, input=conversation, tools=tools)
    calls = [item for item in called.output if item.type == "function_call"]
    emit(
        "tool_call",
        name=calls[0].name if calls else None,
        arguments=json.loads(calls[0].arguments) if calls else None,
        status=called.status,
        strict=called.tools[0].strict if called.tools else None,
    )
    # The output goes back as it came, with the call's output after it.
    conversation += called.output
    conversation.append({
        "type": "function_call_output",
        "call_id": calls[0].call_id,
        "output": json.dumps({"status": "shipped"}),
    })
    answered = client.responses.create(model=model, input=conversation, tools=tools)
    emit("tool_result", text=answered.output_text)

    # 4. Chaining by id is refused: rein keeps no response state.
    try:
        client.responses.create(
            model=model, input="And now?", previous_response_id=answered.id
        )
        emit("previous_response_id", raised=False)
    except BadRequestError as e:
        body = e.body if isinstance(e.body, dict) else {}
        emit(
            "previous_response_id",
            raised=True,
            status=e.status_code,
            message=e.message,
            param=body.get("param"),
            code=body.get("code"),
        )

    # 5. A stream cut mid-way ends in an error event, never in a completion.
    cut = client.responses.create(model=model, input="Count.", stream=True)
    types = []
    error = None
    for event in cut:
        STREAM_EVENT.validate_python(event.to_dict())
        types.append(event.type)
        if event.type == "error":
            error = {"code": event.code, "message": event.message}
    emit("cut_stream", types=types, error=error)
    return 0


if __name__ == "__main__":
    sys.exit(main())
