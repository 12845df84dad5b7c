"""The official `anthropic` package against `rein serve`'s `/v1/messages`.

Run by crates/rein-cli/tests/gateway_messages.rs with REIN_GATEWAY_URL (the
server's base URL, without /v1: the SDK adds it), REIN_API_KEY and
REIN_MODEL (a [models.*] binding), REIN_FALLBACK_MODEL (a binding whose
primary never answers), REIN_CLAUDE_MODEL (a binding on a Messages API
provider) and REIN_CAP (the primary's output cap). Only the
base URL differs from a plain Anthropic setup. Prints one JSON line per
check; exits non-zero on the first unexpected failure.
"""

import json
import os
import sys

import anthropic
from anthropic import Anthropic


def emit(**fields) -> None:
    print(json.dumps(fields), flush=True)


def raised(check: str, e: Exception, **fields) -> None:
    body = getattr(e, "body", None)
    error = body.get("error", {}) if isinstance(body, dict) else {}
    emit(
        check=check,
        raised=True,
        exception=type(e).__name__,
        status=getattr(e, "status_code", None),
        error_type=error.get("type"),
        message=error.get("message", str(e)),
        **fields,
    )


def main() -> int:
    base_url = os.environ["REIN_GATEWAY_URL"]
    client = Anthropic(base_url=base_url, api_key=os.environ["REIN_API_KEY"], max_retries=0)
    model = os.environ["REIN_MODEL"]
    hello = [{"role": "user", "content": "Say hello."}]

    # 1. A message.
    raw = client.messages.with_raw_response.create(model=model, max_tokens=200, messages=hello)
    message = raw.parse()
    emit(
        check="message",
        type=message.type,
        text=message.content[0].text,
        model=message.model,
        stop_reason=message.stop_reason,
        input_tokens=message.usage.input_tokens,
        output_tokens=message.usage.output_tokens,
        rein_model=raw.headers.get("rein-model"),
        rein_fallback=raw.headers.get("rein-fallback"),
    )

    # 2. A streamed message, through the SDK's stream helper.
    with client.messages.stream(
        model=model,
        max_tokens=200,
        system="Be brief.",
        messages=[{"role": "user", "content": "Stream a greeting."}],
    ) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    emit(
        check="stream",
        pieces=len(pieces),
        text="".join(pieces),
        final_text=final.content[0].text,
        stop_reason=final.stop_reason,
        output_tokens=final.usage.output_tokens,
    )

    # 3. A tool call, and its result back to the model.
    tools = [{
        "name": "get_order",
        "description": "Looks up an order.",
        "input_schema": {
            "type": "object",
            "properties": {"order_id": {"type": "string"}},
            "required": ["order_id"],
        },
    }]
    ask = [{"role": "user", "content": "Where is order A-1001?"}]
    called = client.messages.create(model=model, max_tokens=200, messages=ask, tools=tools)
    use = [b for b in called.content if b.type == "tool_use"][0]
    emit(check="tool_use", name=use.name, input=use.input, id=use.id, stop_reason=called.stop_reason)
    answered = client.messages.create(
        model=model,
        max_tokens=200,
        tools=tools,
        messages=ask + [
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in called.content]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": use.id, "content": '{"status": "shipped"}'},
            ]},
        ],
    )
    emit(check="tool_result", text=answered.content[0].text, stop_reason=answered.stop_reason)

    # 4. A streamed tool call: its input arrives as input_json_delta pieces.
    with client.messages.stream(model=model, max_tokens=200, messages=ask, tools=tools) as stream:
        final = stream.get_final_message()
    use = [b for b in final.content if b.type == "tool_use"][0]
    emit(check="stream_tool_use", name=use.name, input=use.input, stop_reason=final.stop_reason)

    # 5. A fallback: the primary never answers; the headers say who did.
    raw = client.messages.with_raw_response.create(
        model=os.environ["REIN_FALLBACK_MODEL"], max_tokens=200, messages=hello
    )
    emit(
        check="fallback",
        text=raw.parse().content[0].text,
        rein_model=raw.headers.get("rein-model"),
        rein_fallback=raw.headers.get("rein-fallback"),
    )

    # 6. Above the primary's cap: the 400 Anthropic sends, before any call.
    try:
        client.messages.create(model=model, max_tokens=int(os.environ["REIN_CAP"]) + 1, messages=hello)
        emit(check="above_cap", raised=False)
    except anthropic.APIStatusError as e:
        raised("above_cap", e)

    # 7. Cut streams raise: the text so far is never a whole message.
    for check, binding in [("cut_stream", model), ("overloaded_stream", os.environ["REIN_CLAUDE_MODEL"])]:
        pieces = []
        try:
            with client.messages.stream(model=binding, max_tokens=200, messages=hello) as stream:
                for text in stream.text_stream:
                    pieces.append(text)
                final = stream.get_final_message()
            emit(check=check, raised=False, text=final.content[0].text if final.content else None)
        except anthropic.APIStatusError as e:
            raised(check, e, pieces="".join(pieces))

    # 7b. A stream cut after its first words that rein recovers: the SDK
    # reads one whole message, the splice invisible but for rein's mark.
    pieces = []
    with client.messages.stream(
        model=os.environ["REIN_RECOVERING_MODEL"], max_tokens=200, messages=hello
    ) as stream:
        for text in stream.text_stream:
            pieces.append(text)
        final = stream.get_final_message()
    emit(
        check="recovered_stream",
        pieces="".join(pieces),
        text=final.content[0].text if final.content else None,
        stop_reason=final.stop_reason,
    )

    # 8. A key rein does not know.
    try:
        Anthropic(base_url=base_url, api_key="not-the-key", max_retries=0).messages.create(
            model=model, max_tokens=10, messages=hello
        )
        emit(check="wrong_key", raised=False)
    except anthropic.APIStatusError as e:
        raised("wrong_key", e)

    # 9. An unknown binding.
    try:
        client.messages.create(model="no-such-binding", max_tokens=10, messages=hello)
        emit(check="unknown_model", raised=False)
    except anthropic.APIStatusError as e:
        raised("unknown_model", e)

    # 10. The bindings, as Anthropic's models API lists them.
    page = client.models.list()
    models = list(page)
    emit(
        check="models",
        ids=[m.id for m in models],
        types=sorted({m.type for m in models}),
        display_names=[m.display_name for m in models],
        created_at=[m.created_at.isoformat() for m in models],
        has_more=page.has_more,
        first_id=page.first_id,
        last_id=page.last_id,
    )
    one = client.models.retrieve(model)
    emit(check="model", id=one.id, type=one.type, display_name=one.display_name)
    try:
        client.models.retrieve("no-such-binding")
        emit(check="unknown_model_info", raised=False)
    except anthropic.APIStatusError as e:
        raised("unknown_model_info", e)

    # 11. The prompt's tokens, counted by rein without a model call.
    counted = client.messages.with_raw_response.count_tokens(model=model, messages=hello)
    emit(
        check="count_tokens",
        input_tokens=counted.parse().input_tokens,
        method=counted.headers.get("rein-token-count"),
    )

    # 12. An endpoint rein does not serve: the SDK still reads the error.
    try:
        client.messages.batches.list()
        emit(check="batches", raised=False)
    except anthropic.APIStatusError as e:
        raised("batches", e, request_id=e.response.headers.get("request-id"))

    # 13. `message_start` says the prompt's tokens, as Anthropic's does:
    # through a Messages API upstream (its own count) and an OpenAI one.
    for check, binding in [("start_usage_claude", os.environ["REIN_CLAUDE_MODEL"]),
                           ("start_usage_openai", model)]:
        start = None
        with client.messages.stream(model=binding, max_tokens=200, messages=hello) as stream:
            for event in stream:
                if event.type == "message_start":
                    start = event.message.usage.input_tokens
            final = stream.get_final_message()
        emit(check=check, start_input_tokens=start, final_input_tokens=final.usage.input_tokens)
    # 14. An image block, as the SDK's vision examples send one.
    pixel = (
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGA"
        "hKmMIQAAAABJRU5ErkJggg=="
    )
    seen = client.messages.create(
        model=os.environ["REIN_CLAUDE_MODEL"],
        max_tokens=100,
        messages=[{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": pixel}},
            {"type": "text", "text": "What is in this image?"},
        ]}],
    )
    emit(check="image", text=seen.content[0].text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
