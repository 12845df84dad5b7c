//! Health memory in the model's view: the tool descriptions a turn sends
//! carry a short note for a tool rein will refuse now or that recently
//! failed (issue 16 item 4; seed 000, "Health memory should also feed into
//! planning").
//!
//! # Why a note, not only a refusal
//!
//! A refused call costs the model a turn and tells it only afterwards. A
//! note in the description lets it plan around the tool from the start:
//! "the model is very good at making the right trade-off when it has
//! enough information". The refusal stays: the note informs, the breaker
//! enforces.
//!
//! | state of the tool (its arm or its resource group's) | note appended to its description |
//! | --- | --- |
//! | open here, open in another process (shared), or cooling down after a Retry-After | `[unavailable until HH:MM UTC; choose another way]` |
//! | half-open here (probing after an opening) | `[recently unstable]` |
//! | otherwise | none |

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rein_core::Clock;
use rein_core::breaker::{ArmKind, BreakerState};
use serde_json::Value;

use super::Engine;
use super::binding::{AgentBinding, ToolBinding};

impl Engine {
    /// The tool definitions of `agent` as the model sees them this turn:
    /// each with its health note, if any (see the module docs).
    pub(super) async fn tools_with_health(&self, agent: &AgentBinding) -> Vec<Value> {
        if let Some(shared) = self.shared_breakers() {
            shared.refresh().await;
        }
        let mut tools = agent.tool_definitions.clone();
        for definition in &mut tools {
            let Some(function) = definition.get_mut("function") else {
                continue;
            };
            let Some(tool) = function
                .get("name")
                .and_then(Value::as_str)
                .and_then(|name| agent.tools.get(name))
            else {
                continue;
            };
            let Some(note) = self.health_note(tool) else {
                continue;
            };
            let described = function
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let with_note = format!("{described} {note}");
            function["description"] = Value::String(with_note.trim_start().to_owned());
        }
        tools
    }

    /// The note for `tool` now, if any.
    fn health_note(&self, tool: &ToolBinding) -> Option<String> {
        let local = self.open_arm(tool).map(|(_, _, left)| left);
        let shared = self.shared_breakers().and_then(|shared| {
            let mut arms = vec![(ArmKind::Tool, tool.name.as_str())];
            if let Some(group) = &tool.resource_group {
                arms.push((ArmKind::ResourceGroup, group.as_str()));
            }
            arms.into_iter()
                .filter_map(|(kind, name)| shared.refusal(kind, name).map(|(_, left)| left))
                .max()
        });
        if let Some(left) = local.max(shared) {
            let until = self.clock.system_now() + left;
            return Some(format!(
                "[unavailable until {} UTC; choose another way]",
                hh_mm(until)
            ));
        }
        let breakers = self.shared.breakers();
        let half_open = std::iter::once((ArmKind::Tool, tool.name.as_str()))
            .chain(
                tool.resource_group
                    .as_deref()
                    .map(|g| (ArmKind::ResourceGroup, g)),
            )
            .any(|(kind, name)| breakers.state(kind, name) == BreakerState::HalfOpen);
        half_open.then(|| "[recently unstable]".to_owned())
    }
}

/// `HH:MM` of `at` in UTC, rounded up to the next minute (a tool said to
/// be unavailable until 14:05 is not called before then).
fn hh_mm(at: SystemTime) -> String {
    let secs = at
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs();
    let minutes = secs.div_ceil(60);
    format!("{:02}:{:02}", (minutes / 60) % 24, minutes % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_as_utc_hours_and_minutes_rounded_up() {
        let at = |secs| UNIX_EPOCH + Duration::from_secs(secs);
        assert_eq!(hh_mm(at(0)), "00:00");
        assert_eq!(hh_mm(at(14 * 3600 + 4 * 60 + 1)), "14:05");
        assert_eq!(hh_mm(at(23 * 3600 + 59 * 60 + 30)), "00:00");
    }
}
