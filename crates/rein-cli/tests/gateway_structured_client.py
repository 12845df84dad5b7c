"""Structured output through `rein serve`'s gateway with the official
`openai` package: `chat.completions.parse` and `.stream` with a Pydantic
`response_format`, answered by the binding's Anthropic fallback while its
OpenAI primary is down, then a link that answers prose.

Run by crates/rein-cli/tests/gateway_structured.rs with REIN_GATEWAY_URL
(ending in /v1), REIN_API_KEY, REIN_MODEL (the binding with the fallback)
and REIN_PROSE_MODEL (a binding whose one link answers prose). Prints one
JSON line per check; exits non-zero on the first failure.
"""

import json
import os
import sys

import openai
from openai import OpenAI
from pydantic import BaseModel


class Delivery(BaseModel):
    order_id: str
    eta_days: int


def main() -> int:
    client = OpenAI(
        base_url=os.environ["REIN_GATEWAY_URL"],
        api_key=os.environ["REIN_API_KEY"],
        max_retries=0,
    )
    messages = [{"role": "user", "content": "When does A-1001 arrive?"}]

    # 1. Parsed from a whole answer.
    raw = client.chat.completions.with_raw_response.parse(
        model=os.environ["REIN_MODEL"],
        messages=messages,
        response_format=Delivery,
    )
    parsed = raw.parse().choices[0].message.parsed
    print(json.dumps({
        "check": "parse",
        "parsed": parsed.model_dump() if parsed else None,
        "rein_model": raw.headers.get("rein-model"),
        "rein_fallback": raw.headers.get("rein-fallback"),
    }), flush=True)

    # 2. Parsed from a stream.
    with client.chat.completions.stream(
        model=os.environ["REIN_MODEL"],
        messages=messages,
        response_format=Delivery,
    ) as stream:
        final = stream.get_final_completion()
    parsed = final.choices[0].message.parsed
    print(json.dumps({
        "check": "stream",
        "parsed": parsed.model_dump() if parsed else None,
        "finish_reason": final.choices[0].finish_reason,
    }), flush=True)

    # 3. Prose is an error the SDK raises, never a parsed None.
    try:
        client.chat.completions.parse(
            model=os.environ["REIN_PROSE_MODEL"],
            messages=messages,
            response_format=Delivery,
        )
        print(json.dumps({"check": "prose", "raised": None}), flush=True)
    except openai.APIStatusError as e:
        print(json.dumps({
            "check": "prose",
            "raised": type(e).__name__,
            "status": e.status_code,
            "message": str(e),
        }), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
