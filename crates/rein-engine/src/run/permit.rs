//! A breaker permit held for one call: its outcome is reported once, and a
//! permit whose call never reports one is given back unused when dropped.
//!
//! # Why a guard
//!
//! A half-open arm admits a bounded number of probes and refuses every
//! other call until they report. A call future can be dropped at any await
//! — a cancelled run, a timeout around it, an interrupt, a lost claim — and
//! a permit released by hand on each early return leaks on those: the
//! arm's probe slot stays taken and the target is refused until the arm
//! reopens. Held by this guard, the permit goes back as
//! [`Breakers::on_ignored`] (a call that went away says nothing about the
//! target's health) however the future ends. Tool calls, resource groups
//! and provider calls all hold their permits this way.

use std::sync::{Arc, Mutex, PoisonError};

use rein_core::breaker::{ArmKind, Breakers, Permit, Transition};
use rein_core::{Failure, Instant};

/// A permit of arm (`kind`, `name`), reported at most once: by
/// [`HeldPermit::finish`], or as ignored when dropped unreported.
pub(crate) struct HeldPermit {
    breakers: Arc<Mutex<Breakers>>,
    kind: ArmKind,
    name: String,
    /// `None` once reported.
    permit: Option<Permit>,
}

impl HeldPermit {
    /// Holds `permit`, issued by arm (`kind`, `name`) of `breakers`.
    pub(crate) fn new(
        breakers: Arc<Mutex<Breakers>>,
        kind: ArmKind,
        name: impl Into<String>,
        permit: Permit,
    ) -> HeldPermit {
        HeldPermit {
            breakers,
            kind,
            name: name.into(),
            permit: Some(permit),
        }
    }

    /// The arm's kind.
    pub(crate) fn kind(&self) -> ArmKind {
        self.kind
    }

    /// The arm's name (the tool, group or provider).
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Gives the permit back without an outcome: the call said nothing
    /// about the target's health (a 429: a rate limit is not an outage).
    pub(crate) fn ignore(&mut self) {
        if let Some(permit) = self.permit.take() {
            self.breakers
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .on_ignored(self.kind, &self.name, permit);
        }
    }

    /// Reports the call's outcome at `now`; the arm's transition, or
    /// [`Transition::Unchanged`] when it was reported already.
    pub(crate) fn finish(&mut self, outcome: Result<(), &Failure>, now: Instant) -> Transition {
        let Some(permit) = self.permit.take() else {
            return Transition::Unchanged;
        };
        self.breakers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .on_outcome(self.kind, &self.name, permit, outcome, now)
    }
}

impl Drop for HeldPermit {
    fn drop(&mut self) {
        if let Some(permit) = self.permit.take() {
            self.breakers
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .on_ignored(self.kind, &self.name, permit);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use rein_core::Category;
    use rein_core::breaker::{Admit, BreakerState, BreakersConfig};

    use super::*;

    /// Breakers whose tool arm opens after one failure for 1 s.
    fn breakers() -> Arc<Mutex<Breakers>> {
        let mut config = BreakersConfig::default();
        config.tool.consecutive_failures = Some(1);
        config.tool.break_duration = Duration::from_secs(1);
        config.tool.half_open_probes = 1;
        config.tool.close_after_successes = 1;
        Arc::new(Mutex::new(Breakers::new(config).unwrap()))
    }

    fn admit(b: &Arc<Mutex<Breakers>>, now: Instant) -> Option<HeldPermit> {
        match b.lock().unwrap().admit(ArmKind::Tool, "t", now).admit {
            Admit::Accepted(p) => Some(HeldPermit::new(b.clone(), ArmKind::Tool, "t", p)),
            Admit::Rejected { .. } => None,
        }
    }

    /// The arm opened by one failure, then half-open with its probe out.
    fn half_open_with_probe(b: &Arc<Mutex<Breakers>>, t0: Instant) -> HeldPermit {
        let mut first = admit(b, t0).unwrap();
        let _opened = first.finish(Err(&Failure::new("t", Category::Transient)), t0);
        assert_eq!(
            b.lock().unwrap().state(ArmKind::Tool, "t"),
            BreakerState::Open
        );
        let later = t0 + Duration::from_secs(2);
        let probe = admit(b, later).expect("the probe is admitted");
        assert!(admit(b, later).is_none(), "one probe at a time");
        probe
    }

    #[test]
    fn dropped_probe_returns_its_slot() {
        let b = breakers();
        let t0 = Instant::from_origin(Duration::ZERO);
        let probe = half_open_with_probe(&b, t0);
        drop(probe);
        let later = t0 + Duration::from_secs(2);
        assert!(admit(&b, later).is_some(), "the slot came back");
    }

    #[test]
    fn finished_probe_is_not_released_again_on_drop() {
        let b = breakers();
        let t0 = Instant::from_origin(Duration::ZERO);
        let mut probe = half_open_with_probe(&b, t0);
        let later = t0 + Duration::from_secs(2);
        let transition = probe.finish(Ok(()), later);
        assert!(transition.is_change(), "{transition:?}");
        assert_eq!(
            probe.finish(Ok(()), later),
            Transition::Unchanged,
            "reported once"
        );
        drop(probe);
        assert_eq!(
            b.lock().unwrap().state(ArmKind::Tool, "t"),
            BreakerState::Closed
        );
    }
}
