//! How an OpenAI-compatible server continues an assistant prefix, which
//! rein asks for to recover a stream cut after its first token.
//!
//! # Why a setting
//!
//! Chat Completions has no standard prefill: a final assistant message is
//! read as a turn already taken, and the model answers a new one after it.
//! Spliced onto the text a client already holds, that new turn would read
//! as nonsense, so rein sends a continuation only to a server that says it
//! continues one, in the way it does. The Anthropic Messages API continues
//! a final assistant message natively and needs no setting.
//!
//! | value | what is sent | servers |
//! | --- | --- | --- |
//! | unset | no continuation: the link is passed over | OpenAI, most others |
//! | `prefix` | `"prefix": true` on the last (assistant) message | Mistral, DeepSeek (beta) |
//! | `continue_final_message` | `"continue_final_message": true, "add_generation_prompt": false` | vLLM, SGLang |

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How an OpenAI-compatible server is told to continue the last
/// (assistant) message (`[providers.NAME] continuation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Continuation {
    /// `"prefix": true` on the last message (Mistral, DeepSeek).
    Prefix,
    /// `"continue_final_message": true` and `"add_generation_prompt":
    /// false` on the request (vLLM, SGLang).
    ContinueFinalMessage,
}

impl Continuation {
    /// The value as written in config.
    pub fn as_str(self) -> &'static str {
        match self {
            Continuation::Prefix => "prefix",
            Continuation::ContinueFinalMessage => "continue_final_message",
        }
    }
}
