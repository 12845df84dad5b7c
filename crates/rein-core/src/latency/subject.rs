//! [`LatencySubject`]: what a latency histogram measures.

use std::fmt;

use super::scale::ScaleBucket;

/// What a [`LatencyHistogram`](super::LatencyHistogram) measures, and the
/// key it is stored under.
///
/// | subject | key | unit of a sample |
/// | --- | --- | --- |
/// | a tool's attempts | `tool:NAME` | the attempt's latency |
/// | a tool's attempts of one argument-scale bucket | `tool_scale:NAME/LOW-HIGH` (`/LOW+` for the overflow) | the attempt's latency |
/// | a model's calls | `model:PROVIDER/MODEL` | the call's latency |
/// | a model's output | `model_per_token:PROVIDER/MODEL` | the call's latency per output token |
/// | a model's streamed answers | `model_first_token:PROVIDER/MODEL` | the time from sending to the stream's first event |
///
/// # Why per output token
///
/// A model call's latency grows with what it writes: a profile over calls
/// of 10 and of 2,000 output tokens mixes two distributions (seed 000:
/// "profiles must be computed separately per parameter scale"). The time
/// per output token is comparable across calls; with the call latency it
/// gives both the base and the slope.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum LatencySubject {
    /// A tool's attempts, by tool name.
    Tool(String),
    /// A tool's attempts whose measured argument falls in one bucket of
    /// its `latency.scale` (each is also counted under [`Tool`](Self::Tool)).
    /// A kind of its own, so a `tool:NAME` key keeps meaning every
    /// attempt of the tool.
    ToolScale {
        /// The tool's name.
        tool: String,
        /// The bucket.
        bucket: ScaleBucket,
    },
    /// A model's calls.
    Model {
        /// The provider's name in config.
        provider: String,
        /// The model, as the provider names it.
        model: String,
    },
    /// A model's latency per output token.
    ModelPerToken {
        /// The provider's name in config.
        provider: String,
        /// The model, as the provider names it.
        model: String,
    },
    /// A model's time to the first event of a streamed answer (its whole
    /// answer is recorded as [`LatencySubject::Model`] too).
    ModelFirstToken {
        /// The provider's name in config.
        provider: String,
        /// The model, as the provider names it.
        model: String,
    },
}

impl LatencySubject {
    /// A tool's subject.
    pub fn tool(name: &str) -> Self {
        LatencySubject::Tool(name.to_owned())
    }

    /// The stored key (see the table on the type).
    pub fn key(&self) -> String {
        self.to_string()
    }

    /// The subject a stored key names; `None` for a key that is not one.
    pub fn parse(key: &str) -> Option<Self> {
        let (kind, rest) = key.split_once(':')?;
        if rest.is_empty() {
            return None;
        }
        let model = || {
            let (provider, model) = rest.split_once('/')?;
            (!provider.is_empty() && !model.is_empty())
                .then(|| (provider.to_owned(), model.to_owned()))
        };
        match kind {
            "tool" => Some(LatencySubject::Tool(rest.to_owned())),
            "tool_scale" => {
                let (tool, bucket) = rest.rsplit_once('/')?;
                let bucket = ScaleBucket::parse(bucket)?;
                (!tool.is_empty()).then(|| LatencySubject::ToolScale {
                    tool: tool.to_owned(),
                    bucket,
                })
            }
            "model" => model().map(|(provider, model)| LatencySubject::Model { provider, model }),
            "model_per_token" => {
                model().map(|(provider, model)| LatencySubject::ModelPerToken { provider, model })
            }
            "model_first_token" => {
                model().map(|(provider, model)| LatencySubject::ModelFirstToken { provider, model })
            }
            _ => None,
        }
    }
}

impl fmt::Display for LatencySubject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LatencySubject::Tool(name) => write!(f, "tool:{name}"),
            LatencySubject::ToolScale { tool, bucket } => write!(f, "tool_scale:{tool}/{bucket}"),
            LatencySubject::Model { provider, model } => write!(f, "model:{provider}/{model}"),
            LatencySubject::ModelPerToken { provider, model } => {
                write!(f, "model_per_token:{provider}/{model}")
            }
            LatencySubject::ModelFirstToken { provider, model } => {
                write!(f, "model_first_token:{provider}/{model}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip() {
        for s in [
            LatencySubject::tool("get_order"),
            LatencySubject::ToolScale {
                tool: "search".into(),
                bucket: ScaleBucket {
                    low: 101,
                    high: Some(1000),
                },
            },
            LatencySubject::ToolScale {
                tool: "search".into(),
                bucket: ScaleBucket {
                    low: 10_001,
                    high: None,
                },
            },
            LatencySubject::Model {
                provider: "openai".into(),
                model: "gpt-4o/mini".into(),
            },
            LatencySubject::ModelPerToken {
                provider: "openai".into(),
                model: "m".into(),
            },
            LatencySubject::ModelFirstToken {
                provider: "openai".into(),
                model: "m".into(),
            },
        ] {
            assert_eq!(LatencySubject::parse(&s.key()), Some(s));
        }
        assert_eq!(
            LatencySubject::parse("tool:search/0-100"),
            Some(LatencySubject::tool("search/0-100")),
            "an old `tool:` key keeps its meaning"
        );
        for bad in [
            "",
            "tool:",
            "model:x",
            "model:/m",
            "other:x",
            "nocolon",
            "tool_scale:search",
            "tool_scale:/0-100",
            "tool_scale:search/9-1",
        ] {
            assert_eq!(LatencySubject::parse(bad), None, "{bad}");
        }
    }
}
