//! `POST /v1/embeddings`: OpenAI's embeddings API over a binding whose
//! links are embedding models, through the same breakers, provider slots,
//! retries, fallbacks, key budgets and idempotency as chat
//! ([`rein_engine::run::Engine::embed`]).
//!
//! Only a binding of `kind = "embedding"` is asked (a chat binding is a
//! 400 saying which is which). A link whose provider has no embeddings API
//! (an Anthropic one) is passed over; with none left, the 400 says so.
//!
//! | member | how |
//! | --- | --- |
//! | `model`, `input` (a string or strings) | read: each string one vector, in order |
//! | `dimensions`, `user` | passed |
//! | `encoding_format` `float` or `base64` | answered so; rein asks the provider for floats and encodes them itself (little-endian `float32`, as OpenAI's `base64`) |
//! | `input` as token ids (integers) | refused: rein's links may be any provider, whose tokenizers differ |
//! | any other member | refused, as OpenAI refuses it |

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::HeaderMap;
use axum::response::Response;
use base64::Engine as _;
use rein_engine::provider::{Embeddings, Message, ModelRequest, ModelResponse, TurnStream};
use rein_engine::run::ModelError;
use serde::Deserialize;
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde_json::{Map, Value, json};
use utoipa::ToSchema;

use super::openai::Errors;
use super::{Call, EventStream, OverCap, Wire};
use crate::http::auth::Caller;
use crate::http::problem::Problem;
use crate::http::state::AppState;

/// The route.
pub const PATH: &str = "/v1/embeddings";

/// The errors of [`PATH`].
const ERRORS: Errors = Errors::titled("Embedding failed");

/// OpenAI's embeddings request.
#[derive(Debug, Deserialize, ToSchema)]
pub struct EmbeddingRequest {
    /// A `[models.*]` binding whose links are embedding models.
    #[schema(min_length = 1)]
    pub model: String,
    /// The text to embed, or texts (one vector each, in order).
    pub input: EmbeddingInput,
    /// `float` (the default) or `base64`.
    #[serde(default)]
    pub encoding_format: Option<EncodingFormat>,
    /// How many dimensions the vectors have, for models that can shorten
    /// them.
    #[serde(default)]
    #[schema(minimum = 1)]
    pub dimensions: Option<u32>,
    /// The end user, for the provider's abuse monitoring.
    #[serde(default)]
    pub user: Option<String>,
}

/// `input`: a string or strings.
#[derive(Debug)]
pub enum EmbeddingInput {
    /// One text.
    Text(String),
    /// Several.
    Texts(Vec<String>),
}

/// Written by hand: the derive cannot say that a text and the array's
/// items are non-empty, and an API fuzzer rightly takes an empty input the
/// document allowed and rein refused for a defect.
impl utoipa::PartialSchema for EmbeddingInput {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, OneOfBuilder, Type};
        let text = || {
            ObjectBuilder::new()
                .schema_type(Type::String)
                .min_length(Some(1))
        };
        OneOfBuilder::new()
            .description(Some("a text, or texts (one vector each, in order)"))
            .item(text())
            .item(ArrayBuilder::new().items(text()).min_items(Some(1)))
            .into()
    }
}

impl ToSchema for EmbeddingInput {}

/// `encoding_format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum EncodingFormat {
    /// JSON numbers.
    Float,
    /// Each vector's little-endian `float32` bytes, base64.
    Base64,
}

/// The members [`EmbeddingRequest`] reads.
const READ: [&str; 5] = ["model", "input", "encoding_format", "dimensions", "user"];

impl<'de> Deserialize<'de> for EmbeddingInput {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Either;
        impl<'de> Visitor<'de> for Either {
            type Value = EmbeddingInput;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string or an array of strings")
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(EmbeddingInput::Text(v.to_owned()))
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut texts = Vec::new();
                while let Some(item) = seq.next_element::<Value>()? {
                    match item {
                        Value::String(text) => texts.push(text),
                        Value::Number(_) | Value::Array(_) => {
                            return Err(de::Error::custom(
                                "token ids are not read: send text (a binding's links may be any \
                                 provider, whose tokenizers differ)",
                            ));
                        }
                        _ => return Err(de::Error::custom("each input must be a string")),
                    }
                }
                Ok(EmbeddingInput::Texts(texts))
            }
        }
        deserializer.deserialize_any(Either)
    }
}

/// Embeds the input with a binding's embedding model.
#[utoipa::path(
    post, path = "/v1/embeddings", tag = "gateway",
    params(("Idempotency-Key" = Option<String>, Header, nullable = false, min_length = 1, pattern = "^[!-~]+$",
            description = "Makes the request safe to retry"),
           ("Rein-Deadline-Ms" = Option<u64>, Header, nullable = false, minimum = 1,
            description = "How long the call may take, fallbacks and retries included (default: the binding's `deadline`)")),
    request_body(content = EmbeddingRequest, description = "OpenAI's embeddings request; `model` names a [models.*] binding of embedding models"),
    responses(
        (status = 200, description = "the embedding list", body = Object,
         headers(("Rein-Model" = String, description = "provider/model that answered"),
                 ("Rein-Fallback" = String, description = "true when a fallback link answered"))),
        (status = 400, description = "invalid request: a malformed or unrecognized member, token ids, or no link of the binding has an embeddings API", body = Problem),
        (status = 401, description = "missing or invalid API key", body = Problem),
        (status = 404, description = "unknown model binding", body = Problem),
        (status = 409, description = "the same Idempotency-Key is still in progress", body = Problem),
        (status = 408, description = "the body stopped arriving (server.limits.body_timeout)", body = Problem),
        (status = 413, description = "body over the limit", body = Problem),
        (status = 422, description = "the same Idempotency-Key with another request", body = Problem),
        (status = 429, description = "every link is rate limited, or the key's budget is spent (with `Retry-After`)", body = Problem),
        (status = 501, description = "Idempotency-Key sent while idempotency is disabled", body = Problem),
        (status = 502, description = "every link failed", body = Problem),
        (status = 503, description = "every link's circuit is open, or the server is draining", body = Problem),
        (status = 504, description = "the deadline ran out", body = Problem),
    ),
    security(("bearer" = []))
)]
pub async fn embeddings(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    super::handle::<OpenAiEmbeddings>(state, caller, headers, body).await
}

/// What the embeddings answer needs beyond the [`Call`].
pub(super) struct OpenAiEmbeddings {
    encoding: EncodingFormat,
}

impl Wire for OpenAiEmbeddings {
    const PATH: &'static str = PATH;
    const EMBEDS: bool = true;

    fn parse(body: &[u8]) -> Result<Call<OpenAiEmbeddings>, Problem> {
        parse(body)
    }

    fn over_cap(over: &OverCap) -> Problem {
        ERRORS.over_cap(over)
    }

    fn failed(e: &ModelError) -> Problem {
        ERRORS.failed(e)
    }

    fn bad_deadline(message: String) -> Problem {
        ERRORS.bad_deadline(message)
    }

    fn body(_call: &Call<OpenAiEmbeddings>, _model: &str, _response: &ModelResponse) -> Value {
        // Never a turn: [`Wire::EMBEDS`] asks for embeddings.
        Value::Null
    }

    fn embedded_body(call: &Call<OpenAiEmbeddings>, model: &str, embeddings: &Embeddings) -> Value {
        list_body(call.wire.encoding, model, embeddings)
    }

    fn events(
        _call: Call<OpenAiEmbeddings>,
        _model: String,
        _turn: TurnStream,
        _prompt: Option<u64>,
    ) -> EventStream {
        // Never streamed: `stream` is not a member of the request.
        Box::pin(futures_util::stream::empty())
    }
}

/// OpenAI's embedding list.
fn list_body(encoding: EncodingFormat, model: &str, embeddings: &Embeddings) -> Value {
    let data: Vec<Value> = embeddings
        .vectors
        .iter()
        .enumerate()
        .map(|(index, vector)| {
            let embedding = match encoding {
                EncodingFormat::Float => json!(vector),
                EncodingFormat::Base64 => {
                    let bytes: Vec<u8> = vector.iter().flat_map(|v| v.to_le_bytes()).collect();
                    json!(base64::engine::general_purpose::STANDARD.encode(bytes))
                }
            };
            json!({"object": "embedding", "index": index, "embedding": embedding})
        })
        .collect();
    json!({
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": embeddings.usage.input, "total_tokens": embeddings.usage.input},
    })
}

/// Reads OpenAI's embeddings request into rein's: each input a user
/// message.
fn parse(body: &[u8]) -> Result<Call<OpenAiEmbeddings>, Problem> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let request: EmbeddingRequest = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let pointer = crate::http::pointer::of_path(e.path());
        let message = match &pointer {
            Some(pointer) => format!(
                "the body is not an embeddings request: at {pointer}: {}",
                e.inner()
            ),
            None => format!("the body is not an embeddings request: {}", e.inner()),
        };
        ERRORS.invalid_at(message, pointer)
    })?;
    if let Some(member) = super::unread_member(body, &READ) {
        return Err(ERRORS.invalid_at(
            format!("Unrecognized request argument supplied: {member}"),
            Some(crate::http::pointer::of_keys(&[&member])),
        ));
    }
    if request.model.is_empty() {
        return Err(ERRORS.invalid_at(
            "`model` must name a [models.*] binding; it is empty".into(),
            Some("/model".into()),
        ));
    }
    let texts = match request.input {
        EmbeddingInput::Text(text) => vec![text],
        EmbeddingInput::Texts(texts) => texts,
    };
    if texts.is_empty() || texts.iter().any(String::is_empty) {
        return Err(ERRORS.invalid_at(
            "`input` must be a non-empty string or a non-empty array of non-empty strings".into(),
            Some("/input".into()),
        ));
    }
    if request.dimensions == Some(0) {
        return Err(ERRORS.invalid_at(
            "`dimensions` must be at least 1".into(),
            Some("/dimensions".into()),
        ));
    }
    let mut options = Map::new();
    if let Some(dimensions) = request.dimensions {
        options.insert("dimensions".into(), json!(dimensions));
    }
    if let Some(user) = request.user {
        options.insert("user".into(), json!(user));
    }
    Ok(Call {
        binding: request.model,
        // The caller's, set once the body is parsed.
        tenant: None,
        request: ModelRequest {
            model: String::new(),
            messages: texts.into_iter().map(Message::user).collect(),
            tools: Vec::new(),
            max_tokens: None,
            options,
            continuation: false,
        },
        max_tokens_param: "max_tokens",
        stream: false,
        // The caller's, read from the headers.
        trace_parent: None,
        ignored: Vec::new(),
        spender: None,
        wire: OpenAiEmbeddings {
            encoding: request.encoding_format.unwrap_or(EncodingFormat::Float),
        },
    })
}

#[cfg(test)]
mod tests {
    use rein_engine::provider::TokenUsage;

    use super::*;

    fn problem_of(body: Value) -> Value {
        let Err(problem) = parse(body.to_string().as_bytes()) else {
            panic!("{body} parses");
        };
        serde_json::to_value(problem).unwrap()
    }

    #[test]
    fn each_input_is_one_message_and_the_options_pass() {
        let Ok(call) = parse(
            json!({"model": "embed", "input": ["a", "b"], "dimensions": 8, "user": "u-1",
                   "encoding_format": "base64"})
            .to_string()
            .as_bytes(),
        ) else {
            panic!("parses");
        };
        assert_eq!(
            call.request.messages,
            vec![Message::user("a"), Message::user("b")]
        );
        assert_eq!(call.request.options["dimensions"], 8);
        assert_eq!(call.request.options["user"], "u-1");
        assert_eq!(call.wire.encoding, EncodingFormat::Base64);
    }

    #[test]
    fn token_ids_empty_input_and_unknown_members_are_refused_by_name() {
        let p = problem_of(json!({"model": "embed", "input": [[1, 2, 3]]}));
        assert_eq!(p["field"], "/input", "{p}");
        assert!(p["detail"].as_str().unwrap().contains("token ids"), "{p}");
        let p = problem_of(json!({"model": "embed", "input": []}));
        assert_eq!(p["field"], "/input", "{p}");
        let p = problem_of(json!({"model": "embed", "input": "a", "truncate": true}));
        assert_eq!(p["field"], "/truncate", "{p}");
        let p = problem_of(json!({"model": "embed", "input": "a", "encoding_format": "int8"}));
        assert_eq!(p["field"], "/encoding_format", "{p}");
    }

    #[test]
    fn base64_is_each_vector_s_little_endian_float32_bytes() {
        let embeddings = Embeddings {
            vectors: vec![vec![1.0, -0.5]],
            usage: TokenUsage {
                input: 3,
                output: 0,
            },
        };
        let floats = list_body(EncodingFormat::Float, "m", &embeddings);
        assert_eq!(floats["data"][0]["embedding"], json!([1.0, -0.5]));
        assert_eq!(
            floats["usage"],
            json!({"prompt_tokens": 3, "total_tokens": 3})
        );
        let encoded = list_body(EncodingFormat::Base64, "m", &embeddings);
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(encoded["data"][0]["embedding"].as_str().unwrap())
            .unwrap();
        assert_eq!(bytes, [0, 0, 128, 63, 0, 0, 0, 191]);
    }
}
