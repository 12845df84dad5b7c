//! Multi-arm breakers: independent [`Breaker`]s keyed by ([`ArmKind`], name).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::config::{BreakersConfig, Settings, fields_for};
use super::state::{Admission, Breaker, Permit};
use super::transition::{BreakerState, Transition};
use crate::clock::Instant;
use crate::config::ConfigError;
use crate::failure::{Category, Failure};

/// What an arm guards; each kind has its own settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArmKind {
    /// A model provider (`openai`, `anthropic`).
    Provider,
    /// A single tool.
    Tool,
    /// A group of tools sharing a backend: one failing database trips the
    /// arm for all its tools.
    ResourceGroup,
    /// A cost account: stops spending when spending keeps failing.
    Cost,
}

impl ArmKind {
    /// Every kind, in declaration order.
    pub const ALL: [ArmKind; 4] = [
        ArmKind::Provider,
        ArmKind::Tool,
        ArmKind::ResourceGroup,
        ArmKind::Cost,
    ];

    /// The kind's name as it appears in config and event names.
    pub fn as_str(self) -> &'static str {
        match self {
            ArmKind::Provider => "provider",
            ArmKind::Tool => "tool",
            ArmKind::ResourceGroup => "resource_group",
            ArmKind::Cost => "cost",
        }
    }

    fn index(self) -> usize {
        match self {
            ArmKind::Provider => 0,
            ArmKind::Tool => 1,
            ArmKind::ResourceGroup => 2,
            ArmKind::Cost => 3,
        }
    }
}

impl fmt::Display for ArmKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One arm: a kind and the name of what it guards.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ArmKey {
    /// What the arm guards.
    pub kind: ArmKind,
    /// The provider, tool, resource group or cost account.
    pub name: String,
}

impl ArmKey {
    /// The arm `name` of `kind`.
    pub fn new(kind: ArmKind, name: impl Into<String>) -> Self {
        ArmKey {
            kind,
            name: name.into(),
        }
    }

    /// The name of the arm's events: `breaker.{kind}.{name}`.
    pub fn event_name(&self) -> String {
        format!("breaker.{self}")
    }
}

impl fmt::Display for ArmKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.kind, self.name)
    }
}

/// Independent breakers per ([`ArmKind`], name), created on first use.
///
/// # Why independent arms
///
/// One provider's outage must not refuse calls to another, and one failing
/// tool must not silence the rest; but tools sharing a backend should trip
/// together, and so should spending. Each arm is its own [`Breaker`], built
/// from its kind's settings the first time its name is admitted.
///
/// A call that passes several arms (its provider and its cost account, a
/// tool and its resource group) is admitted by each in turn; when a later
/// arm rejects, release the permits already granted with
/// [`on_ignored`](Breakers::on_ignored).
///
/// Looking up an existing arm borrows the name and allocates nothing; only
/// the first admission of a new name copies it. Arms live in ordered maps
/// so that [`arms`](Breakers::arms) lists them deterministically for
/// metrics and snapshots.
#[derive(Debug, Clone)]
pub struct Breakers {
    /// Indexed by [`ArmKind::index`].
    kinds: [Arms; 4],
}

#[derive(Debug, Clone)]
struct Arms {
    settings: Settings,
    arms: BTreeMap<String, Breaker>,
}

impl Breakers {
    /// Breakers with each kind's settings validated; no arm exists yet.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the kind's setting
    /// (`breaker.provider.break_duration`, …) for any setting
    /// [`Breaker::new`] refuses.
    pub fn new(config: BreakersConfig) -> Result<Breakers, ConfigError> {
        let arms = |kind: ArmKind| -> Result<Arms, ConfigError> {
            Ok(Arms {
                settings: Settings::validate(config.for_kind(kind), fields_for(kind))?,
                arms: BTreeMap::new(),
            })
        };
        Ok(Breakers {
            kinds: [
                arms(ArmKind::Provider)?,
                arms(ArmKind::Tool)?,
                arms(ArmKind::ResourceGroup)?,
                arms(ArmKind::Cost)?,
            ],
        })
    }

    /// Decides whether a call to arm (`kind`, `name`) may proceed at `now`,
    /// creating the arm (closed) on first use. See [`Breaker::admit`].
    pub fn admit(&mut self, kind: ArmKind, name: &str, now: Instant) -> Admission {
        let arms = &mut self.kinds[kind.index()];
        match arms.arms.get_mut(name) {
            Some(breaker) => breaker.admit(now),
            None => {
                let mut breaker = Breaker::from_settings(arms.settings);
                let admission = breaker.admit(now);
                arms.arms.insert(name.to_owned(), breaker);
                admission
            }
        }
    }

    /// Reports a success to arm (`kind`, `name`). See [`Breaker::on_success`].
    pub fn on_success(
        &mut self,
        kind: ArmKind,
        name: &str,
        permit: Permit,
        now: Instant,
    ) -> Transition {
        match self.get_mut(kind, name) {
            Some(breaker) => breaker.on_success(permit, now),
            None => Transition::Unchanged,
        }
    }

    /// Reports a failure to arm (`kind`, `name`). See [`Breaker::on_failure`].
    pub fn on_failure(
        &mut self,
        kind: ArmKind,
        name: &str,
        permit: Permit,
        category: Category,
        now: Instant,
    ) -> Transition {
        match self.get_mut(kind, name) {
            Some(breaker) => breaker.on_failure(permit, category, now),
            None => Transition::Unchanged,
        }
    }

    /// Reports an outcome as a `Result` to arm (`kind`, `name`). See
    /// [`Breaker::on_outcome`].
    pub fn on_outcome(
        &mut self,
        kind: ArmKind,
        name: &str,
        permit: Permit,
        outcome: Result<(), &Failure>,
        now: Instant,
    ) -> Transition {
        match self.get_mut(kind, name) {
            Some(breaker) => breaker.on_outcome(permit, outcome, now),
            None => Transition::Unchanged,
        }
    }

    /// Releases a permit whose call said nothing about the target. See
    /// [`Breaker::on_ignored`].
    pub fn on_ignored(&mut self, kind: ArmKind, name: &str, permit: Permit) {
        if let Some(breaker) = self.get_mut(kind, name) {
            breaker.on_ignored(permit);
        }
    }

    /// The state of arm (`kind`, `name`); an arm never admitted is closed.
    pub fn state(&self, kind: ArmKind, name: &str) -> BreakerState {
        self.get(kind, name)
            .map_or(BreakerState::Closed, Breaker::state)
    }

    /// The arm (`kind`, `name`), if it has been admitted once.
    pub fn get(&self, kind: ArmKind, name: &str) -> Option<&Breaker> {
        self.kinds[kind.index()].arms.get(name)
    }

    /// Every arm created so far, by kind then name.
    pub fn arms(&self) -> impl Iterator<Item = (ArmKind, &str, &Breaker)> {
        ArmKind::ALL.into_iter().flat_map(move |kind| {
            self.kinds[kind.index()]
                .arms
                .iter()
                .map(move |(name, breaker)| (kind, name.as_str(), breaker))
        })
    }

    fn get_mut(&mut self, kind: ArmKind, name: &str) -> Option<&mut Breaker> {
        self.kinds[kind.index()].arms.get_mut(name)
    }
}

impl TryFrom<BreakersConfig> for Breakers {
    type Error = ConfigError;

    fn try_from(config: BreakersConfig) -> Result<Breakers, ConfigError> {
        Breakers::new(config)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::breaker::config::BreakerConfig;
    use crate::breaker::state::Admit;

    fn at(secs: u64) -> Instant {
        Instant::from_origin(Duration::from_secs(secs))
    }

    fn fail(breakers: &mut Breakers, kind: ArmKind, name: &str, now: Instant) -> Transition {
        match breakers.admit(kind, name, now).admit {
            Admit::Accepted(permit) => {
                breakers.on_failure(kind, name, permit, Category::Timeout, now)
            }
            Admit::Rejected { .. } => Transition::Unchanged,
        }
    }

    #[test]
    fn failures_on_one_arm_leave_other_arms_closed() {
        let mut breakers = Breakers::new(BreakersConfig::default()).unwrap();
        let _ = breakers.admit(ArmKind::Tool, "search", at(0));
        for _ in 0..5 {
            let _ = fail(&mut breakers, ArmKind::Provider, "openai", at(0));
        }
        assert_eq!(
            breakers.state(ArmKind::Provider, "openai"),
            BreakerState::Open
        );
        assert_eq!(
            breakers.state(ArmKind::Provider, "anthropic"),
            BreakerState::Closed
        );
        assert_eq!(
            breakers.state(ArmKind::Tool, "search"),
            BreakerState::Closed
        );
        // The same name under another kind is another arm.
        assert!(
            breakers
                .admit(ArmKind::Tool, "openai", at(1))
                .admit
                .is_accepted()
        );
        let rejected = breakers.admit(ArmKind::Provider, "openai", at(1)).admit;
        let failure = rejected.into_result("openai").unwrap_err();
        assert_eq!(failure.category(), Category::CircuitOpen);
        assert_eq!(failure.retry_after(), Some(Duration::from_secs(29)));
    }

    #[test]
    fn cost_arm_uses_its_own_defaults() {
        let mut breakers = Breakers::new(BreakersConfig::default()).unwrap();
        let mut transition = Transition::Unchanged;
        for _ in 0..3 {
            transition = fail(&mut breakers, ArmKind::Cost, "tenant-a", at(0));
        }
        assert_eq!(
            transition.state_after(),
            Some(BreakerState::Open),
            "{transition}"
        );
        let Transition::Opened { break_duration, .. } = transition else {
            unreachable!()
        };
        assert_eq!(break_duration, Duration::from_secs(120));
    }

    #[test]
    fn new_with_invalid_kind_section_names_the_kind() {
        let config = BreakersConfig {
            tool: BreakerConfig {
                close_after_successes: 9,
                ..BreakerConfig::default()
            },
            ..BreakersConfig::default()
        };
        let err = Breakers::new(config).unwrap_err();
        assert_eq!(err.field(), "breaker.tool.close_after_successes");
    }

    #[test]
    fn outcomes_for_an_unknown_arm_are_ignored() {
        let mut breakers = Breakers::new(BreakersConfig::default()).unwrap();
        let Admit::Accepted(permit) = breakers.admit(ArmKind::Tool, "a", at(0)).admit else {
            unreachable!()
        };
        assert_eq!(
            breakers.on_failure(ArmKind::Tool, "b", permit, Category::Timeout, at(0)),
            Transition::Unchanged
        );
        assert!(breakers.get(ArmKind::Tool, "b").is_none());
        assert_eq!(breakers.state(ArmKind::Tool, "b"), BreakerState::Closed);
    }

    #[test]
    fn arms_lists_every_arm_by_kind_then_name() {
        let mut breakers = Breakers::new(BreakersConfig::default()).unwrap();
        for (kind, name) in [
            (ArmKind::Cost, "t"),
            (ArmKind::Tool, "b"),
            (ArmKind::Tool, "a"),
            (ArmKind::Provider, "p"),
        ] {
            let _ = breakers.admit(kind, name, at(0));
        }
        let listed: Vec<(ArmKind, &str)> = breakers.arms().map(|(k, n, _)| (k, n)).collect();
        assert_eq!(
            listed,
            [
                (ArmKind::Provider, "p"),
                (ArmKind::Tool, "a"),
                (ArmKind::Tool, "b"),
                (ArmKind::Cost, "t"),
            ]
        );
    }

    #[test]
    fn arm_key_names_its_events() {
        let key = ArmKey::new(ArmKind::ResourceGroup, "orders-db");
        assert_eq!(key.event_name(), "breaker.resource_group.orders-db");
        assert_eq!(
            serde_json::to_value(&key).unwrap(),
            serde_json::json!({"kind": "resource_group", "name": "orders-db"})
        );
    }
}
