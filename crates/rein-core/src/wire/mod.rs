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
//! | [`anthropic::request`] | Anthropic Messages | the request ([`anthropic::request::MessagesRequest`]) | the provider | the gateway |
//! | [`openai`] | OpenAI Chat Completions | the answer ([`openai::Completion`]), the stream's chunks ([`openai::Chunk`]), the error body | the gateway, the mock model | the provider (a whole answer and the stream) |
//! | [`openai::request`] | OpenAI Chat Completions | the request ([`openai::request::ChatRequest`]) | the provider | the gateway |
//!
//! With the `schema` feature the request types derive `utoipa::ToSchema`:
//! the gateway's OpenAPI document is these types, so what it calls valid
//! is what the gateway reads and what the providers write (besides the
//! few members only some servers read, which providers write and the
//! gateway never reads: they are left out of the schema).
//!
//! # What stays outside, and why
//!
//! - The mock model reads requests as JSON on purpose. It plays the
//!   upstream, and an upstream sees every member sent, known or not; read
//!   through these types, the mock would agree with any misspelling the
//!   provider shares with them, and the tests would not catch it.
//! - The Responses API (`POST /v1/responses`) is the gateway's alone: it
//!   is bridged onto chat completion bindings and no provider speaks it,
//!   so its types live with the gateway.
//! - The caller's options travel from a gateway to a provider as a JSON
//!   map (`rein_engine::provider::ModelRequest`'s `options`) keyed by the
//!   members of OpenAI's request, and of the Messages API's for the two it
//!   alone has (`top_k`, `output_config`); each provider reads the members
//!   it carries into these types and names the rest as ignored.

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

/// A string, or a sequence of `B`: read by hand rather than as an
/// untagged enum, so an error inside a block (an unknown block type) keeps
/// its words and its path instead of "did not match any variant".
///
/// Both formats' message content is either (`"hi"` or `[{"type": "text",
/// …}]`), and so is the Responses API's input, which the gateway reads.
pub fn string_or_seq<'de, D, B>(deserializer: D) -> Result<Result<String, Vec<B>>, D::Error>
where
    D: serde::Deserializer<'de>,
    B: serde::Deserialize<'de>,
{
    use serde::de::{self, SeqAccess, Visitor};

    struct Either<B>(std::marker::PhantomData<B>);
    impl<'de, B: serde::Deserialize<'de>> Visitor<'de> for Either<B> {
        type Value = Result<String, Vec<B>>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a string or an array of content blocks")
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok(Ok(v.to_owned()))
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut blocks = Vec::new();
            while let Some(block) = seq.next_element()? {
                blocks.push(block);
            }
            Ok(Err(blocks))
        }
    }
    deserializer.deserialize_any(Either(std::marker::PhantomData))
}
