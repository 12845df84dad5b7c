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
//! # What is not here, and why
//!
//! The *requests*. The gateway reads them as its own types
//! (`rein_server::gateway`), because they are also its OpenAPI document
//! and say member by member what it passes, maps or refuses; a provider
//! writes them from rein's provider-neutral request, and the caller's
//! options travel in the API's own names, untouched. Neither reads
//! what the other writes: the shapes meet only at the upstream.

pub mod anthropic;
pub mod openai;
