"""The official `openai` package against `rein serve`'s gateway.

Run by crates/rein-cli/tests/gateway.rs with REIN_GATEWAY_URL (the
server's base URL, ending in /v1), REIN_API_KEY and REIN_MODEL (a
[models.*] binding). Only the base URL differs from a plain OpenAI setup.
Prints one JSON line per check; exits non-zero on the first failure.
"""

import json
import os
import sys

from openai import OpenAI


def main() -> int:
    client = OpenAI(
        base_url=os.environ["REIN_GATEWAY_URL"],
        api_key=os.environ["REIN_API_KEY"],
        max_retries=0,
    )
    model = os.environ["REIN_MODEL"]

    # 1. A chat.
    raw = client.chat.completions.with_raw_response.create(
        model=model,
        messages=[{"role": "user", "content": "Say hello."}],
    )
    chat = raw.parse()
    print(json.dumps({
        "check": "chat",
        "content": chat.choices[0].message.content,
        "model": chat.model,
        "finish_reason": chat.choices[0].finish_reason,
        "rein_model": raw.headers.get("rein-model"),
        "rein_fallback": raw.headers.get("rein-fallback"),
        "total_tokens": chat.usage.total_tokens if chat.usage else None,
    }), flush=True)

    # 2. A streamed chat.
    stream = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Stream a greeting."}],
        stream=True,
        stream_options={"include_usage": True},
    )
    pieces = []
    finish = None
    usage = None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage.total_tokens
        for choice in chunk.choices:
            if choice.delta.content:
                pieces.append(choice.delta.content)
            if choice.finish_reason:
                finish = choice.finish_reason
    print(json.dumps({
        "check": "stream",
        "content": "".join(pieces),
        "finish_reason": finish,
        "total_tokens": usage,
    }), flush=True)

    # 3. A tool call.
    tools = [{
        "type": "function",
        "function": {
            "name": "get_order",
            "description": "Looks up an order.",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}},
                "required": ["order_id"],
            },
        },
    }]
    called = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Where is order A-1001?"}],
        tools=tools,
    )
    call = called.choices[0].message.tool_calls[0]
    print(json.dumps({
        "check": "tool_call",
        "name": call.function.name,
        "arguments": json.loads(call.function.arguments),
        "finish_reason": called.choices[0].finish_reason,
    }), flush=True)

    # 4. The tool's result goes back; the model answers.
    answered = client.chat.completions.create(
        model=model,
        messages=[
            {"role": "user", "content": "Where is order A-1001?"},
            called.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": '{"status": "shipped"}'},
        ],
        tools=tools,
    )
    print(json.dumps({
        "check": "tool_result",
        "content": answered.choices[0].message.content,
    }), flush=True)

    # 5. An unknown model is a clear error.
    try:
        client.chat.completions.create(
            model="no-such-binding",
            messages=[{"role": "user", "content": "Hi."}],
        )
        print(json.dumps({"check": "unknown_model", "raised": False}), flush=True)
    except Exception as e:  # the SDK's NotFoundError
        print(json.dumps({
            "check": "unknown_model",
            "raised": True,
            "status": getattr(e, "status_code", None),
            "message": str(e),
        }), flush=True)

    # 6. The bindings, as OpenAI's models API lists them.
    listed = client.models.list()
    models = list(listed)
    print(json.dumps({
        "check": "models",
        "ids": [m.id for m in models],
        "objects": sorted({m.object for m in models}),
        "owned_by": [m.owned_by for m in models],
        "created": [m.created for m in models],
    }), flush=True)
    one = client.models.retrieve(model)
    print(json.dumps({
        "check": "model",
        "id": one.id,
        "object": one.object,
        "owned_by": one.owned_by,
        # The SDK's request id comes from `x-request-id`.
        "request_id": one._request_id,
    }), flush=True)
    for check, call in [
        ("unknown_model_info", lambda: client.models.retrieve("no-such-binding")),
        # An endpoint rein does not serve: the SDK still reads the error.
        ("moderations", lambda: client.moderations.create(input="Hi.")),
    ]:
        try:
            call()
            print(json.dumps({"check": check, "raised": False}), flush=True)
        except Exception as e:  # the SDK's NotFoundError
            body = getattr(e, "body", None)
            print(json.dumps({
                "check": check,
                "raised": True,
                "exception": type(e).__name__,
                "status": getattr(e, "status_code", None),
                "code": body.get("code") if isinstance(body, dict) else None,
                "message": getattr(e, "message", str(e)),
                "request_id": getattr(e, "request_id", None),
            }), flush=True)

    # 7. Embeddings, as the SDK asks for them (base64, decoded by the SDK).
    embedded = client.embeddings.create(model="embed", input=["Hi.", "Bye."])
    print(json.dumps({
        "check": "embeddings",
        "vectors": [e.embedding for e in embedded.data],
        "model": embedded.model,
        "prompt_tokens": embedded.usage.prompt_tokens,
    }), flush=True)

    # 8. An image part, as the SDK's vision examples send one.
    pixel = (
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGA"
        "hKmMIQAAAABJRU5ErkJggg=="
    )
    seen = client.chat.completions.create(
        model=model,
        messages=[{
            "role": "user",
            "content": [
                {"type": "text", "text": "What is in this image?"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{pixel}"}},
            ],
        }],
    )
    print(json.dumps({
        "check": "image",
        "content": seen.choices[0].message.content,
    }), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
