//! The model APIs' wire shapes, one module per format, shared by whoever
//! writes or reads them: the gateway (which answers in them), the
//! providers (which read them from upstreams) and the testkit's mock model
//! (which serves them to tests).
//!
//! # Why one module per format
//!
//! Each shape used to be described three times, as `json!` literals in the
//! gateway and the mock and as `.get("…")` chains in the providers, kept
//! in step by reading. A member one of them spelt differently was found by
//! a client, not by the compiler. Here a shape is a type: a writer cannot
//! leave out a member the format requires, and a reader states what it
//! tolerates (a member absent, a block it does not know) in the type.
//!
//! | module | format | what is here | written by | read by |
//! | --- | --- | --- | --- | --- |
//! | [`anthropic`] | Anthropic Messages | the answer ([`anthropic::Message`]), its blocks and usage, the stream's events | the gateway, the mock model | the provider (a whole answer and the stream) |
//! | [`openai`] | OpenAI Chat Completions | the answer ([`openai::Completion`]), the stream's chunks ([`openai::Chunk`]), the error body | the gateway, the mock model | the provider (a whole answer and the stream) |
//!
//! # What is not here yet
//!
//! The *requests* are still described where they are used: the gateway
//! reads them as its own types (`rein_server::gateway`), which are also
//! its OpenAPI document and say member by member what it passes, maps or
//! refuses; the providers write them as JSON from rein's provider-neutral
//! request, with the caller's options passed in the API's own names; the
//! mock reads them as JSON on purpose, as an upstream sees every member
//! sent, known or not. Sharing them means moving the gateway's request
//! types here with their schema (an optional `utoipa` dependency) and
//! having the providers build them.

pub mod anthropic;
pub mod openai;

/// A member that may be `null`: read as its default, as if absent.
fn nullable<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de> + Default,
{
    <Option<T> as serde::Deserialize>::deserialize(deserializer).map(Option::unwrap_or_default)
}
