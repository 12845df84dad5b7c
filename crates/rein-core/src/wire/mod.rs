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
//! | [`anthropic`] | Anthropic Messages | the answer ([`anthropic::Message`]), its blocks and usage, the stream's events | the gateway, the mock model | the provider (a whole answer) |
//!
//! Not here yet: the Anthropic provider's stream decoder still reads each
//! event as a JSON value (it falls back on the SSE event's name when the
//! data has no `type`, and takes a `message_start` without `content`),
//! and OpenAI's formats are still described where they are used.

pub mod anthropic;
