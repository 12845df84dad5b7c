//! One breaker arm: the [`Breaker`] state machine, its [`Admit`] decision
//! and the [`Permit`] an admitted call reports its outcome with.

use std::time::Duration;

use super::config::{BREAKER_FIELDS, BreakerConfig, RatioSettings, Settings};
use super::transition::{BreakerState, OpenReason, Transition};
use super::window::SlidingWindow;
use crate::clock::Instant;
use crate::config::ConfigError;
use crate::failure::{Category, Failure};

/// A circuit breaker for one target: closed, open or half-open.
///
/// ```text
///                N consecutive counted failures, or
///                failure ratio ≥ open_at over the window
///  ┌────────┐    (with ≥ min_throughput outcomes)        ┌────────┐
///  │ Closed │ ─────────────────────────────────────────▶ │  Open  │
///  └────────┘                                            └────────┘
///       ▲                                                  │    ▲
///       │                            admit at now ≥ until  │    │ probe failed, probes
///       │                                                  ▼    │ inconclusive or unanswered
///       │  ≥ M probe successes and                      ┌──────────┐
///       └────────────────────────────────────────────── │ HalfOpen │
///          probe failure ratio < close_below            └──────────┘
/// ```
///
/// # Why
///
/// A target that is down answers slowly or not at all; calling it anyway
/// spends the run's deadline and budget on failures, and retries multiply
/// the load on a service trying to recover. An open breaker refuses calls
/// up front — with a `circuit_open` [`Failure`] and a `retry_after` — so the
/// model hears "unavailable, do not retry" at once and no call is made
/// (invariant 6). Half-open probes test recovery with a bounded number of
/// real calls instead of the full load.
///
/// # Counting
///
/// Only failures whose [`Category::counts_for_breaker`] is true count:
/// cancellation, content refusals, caller mistakes (`invalid_arguments`,
/// `not_found`, `conflict`, `context_overflow`) and rein's own refusals say
/// nothing about the target's health. An uncounted outcome neither counts
/// as a success nor resets the consecutive count.
///
/// # Invariants
///
/// - While open, [`admit`](Breaker::admit) rejects every call until the
///   break duration has passed.
/// - A half-open period holds at most `half_open_probes` probe slots; a
///   slot is freed only by an outcome that does not count
///   ([`on_ignored`](Breaker::on_ignored), an uncounted category).
/// - Every state change starts a new *epoch*. A [`Permit`] from an earlier
///   epoch is ignored, so a slow call admitted while closed cannot reopen
///   or extend an arm that has opened since, nor count as a probe.
///
/// # Half-open verdicts
///
/// Each probe outcome is judged at once: without a ratio trigger any
/// counted probe failure reopens; with one, a probe failure ratio at or
/// above `open_at` reopens. The arm closes when at least
/// `close_after_successes` probes succeeded and (with a ratio trigger) the
/// probe failure ratio is below `close_below`. When every probe has reported
/// without either verdict — a ratio between `close_below` and `open_at`, the
/// hysteresis band — the arm reopens: recovery was not shown. A half-open
/// arm whose probe slots are all taken and that has no verdict after
/// `half_open_max_wait` reopens too, so lost outcomes cannot wedge it.
///
/// # Growing breaks
///
/// With `max_break_duration` set, an arm that reopens from half-open (its
/// probes failed: no recovery yet) stays open twice as long as the last
/// time, up to `max_break_duration`; a close starts again from
/// `break_duration`. So a short first break gives a target that recovers
/// quickly its calls back within seconds, while one that keeps failing is
/// probed ever more rarely (issue 35, item 4).
///
/// A full half-open arm rejects with `retry_after = break_duration`: the
/// probes' verdict is not known yet, and if they fail the arm stays open for
/// a whole break.
///
/// # Defaults
///
/// | setting | default | range |
/// | --- | --- | --- |
/// | `consecutive_failures` | 5 | ≥ 1, or `null` for off |
/// | `failure_ratio` | off | see below |
/// | `failure_ratio.open_at` | 0.6 | (0, 1] |
/// | `failure_ratio.close_below` | 0.2 | (0, open_at) |
/// | `failure_ratio.window` | 60 s | > 0 |
/// | `failure_ratio.min_throughput` | 20 | ≥ 1 |
/// | `break_duration` | 30 s | > 0 |
/// | `max_break_duration` | off (every break is `break_duration`) | ≥ `break_duration` |
/// | `half_open_probes` | 3 | ≥ 1 |
/// | `close_after_successes` | 2 | 1 ..= half_open_probes |
/// | `half_open_max_wait` | 120 s | > 0 |
///
/// At least one of `consecutive_failures` and `failure_ratio` must be on.
///
/// # Example
///
/// ```
/// # use std::time::Duration;
/// use rein_core::Instant;
/// use rein_core::breaker::{Admit, Breaker, BreakerConfig, BreakerState};
/// use rein_core::failure::Category;
///
/// let mut config = BreakerConfig::default();
/// config.consecutive_failures = Some(2);
/// let mut breaker = Breaker::new(config)?;
/// let now = Instant::ORIGIN;
///
/// for _ in 0..2 {
///     let admission = breaker.admit(now);
///     let Admit::Accepted(permit) = admission.admit else { unreachable!() };
///     let _ = breaker.on_failure(permit, Category::Timeout, now);
/// }
/// assert_eq!(breaker.state(), BreakerState::Open);
/// let rejected = breaker.admit(now + Duration::from_secs(10)).admit;
/// assert_eq!(rejected.retry_after(), Some(Duration::from_secs(20)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Breaker {
    settings: Settings,
    state: State,
    epoch: u64,
    /// Openings in a row without a close between (0 after the first
    /// opening from closed): the exponent of the growing break.
    reopenings: u32,
}

/// The arm's state; each variant carries only its own data.
#[derive(Debug, Clone, PartialEq)]
enum State {
    Closed {
        /// Counted failures since the last success.
        consecutive: u32,
        /// Present only when the ratio trigger is on.
        window: Option<SlidingWindow>,
    },
    Open {
        since: Instant,
        until: Instant,
    },
    HalfOpen {
        since: Instant,
        /// Probe slots taken: probes in flight plus probes that reported.
        admitted: u32,
        successes: u32,
        failures: u32,
    },
}

/// Whether a call may proceed.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a rejected call must not be made"]
pub enum Admit {
    /// Make the call, then report its outcome with the permit.
    Accepted(Permit),
    /// Do not call; the arm is open or its probe slots are taken.
    Rejected {
        /// How long until the arm may admit calls again (a hint).
        retry_after: Duration,
    },
}

impl Admit {
    /// Whether the call may proceed.
    pub fn is_accepted(&self) -> bool {
        matches!(self, Admit::Accepted(_))
    }

    /// The wait a rejection asks for, or `None` when accepted.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Admit::Accepted(_) => None,
            Admit::Rejected { retry_after } => Some(*retry_after),
        }
    }

    /// The permit of an accepted call, or the `circuit_open` [`Failure`]
    /// for `target` (the arm's name) that the model sees instead of a call.
    ///
    /// # Errors
    ///
    /// [`Failure::circuit_open`] with the rejection's `retry_after`.
    pub fn into_result(self, target: &str) -> Result<Permit, Failure> {
        match self {
            Admit::Accepted(permit) => Ok(permit),
            Admit::Rejected { retry_after } => Err(Failure::circuit_open(target, retry_after)),
        }
    }
}

/// The answer to [`Breaker::admit`]: the decision, and the transition the
/// admission caused (open → half-open, or half-open → open when the probes
/// never answered), to record as an event.
#[derive(Debug, PartialEq)]
#[must_use = "a rejected call must not be made"]
pub struct Admission {
    /// Whether the call may proceed.
    pub admit: Admit,
    /// The state change, usually [`Transition::Unchanged`].
    pub transition: Transition,
}

/// Proof that a call was admitted, to report its outcome with exactly once.
///
/// Not `Clone`: an outcome is reported once, by value. A permit remembers
/// the epoch it was issued in; reported after the arm has changed state it
/// is ignored. A permit belongs to the breaker that issued it; reporting it
/// to another arm is a caller bug the breaker cannot detect.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "report the call's outcome with on_success, on_failure or on_ignored"]
pub struct Permit {
    epoch: u64,
    probe: bool,
}

impl Permit {
    /// The breaker epoch the call was admitted in.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Whether the call is a half-open probe.
    pub fn is_probe(&self) -> bool {
        self.probe
    }
}

/// What a counted outcome means in the half-open state.
enum Verdict {
    Close,
    Reopen(OpenReason),
    Pending,
}

impl Breaker {
    /// A closed breaker with the given settings.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the setting (`breaker.…`) when a count,
    /// threshold or duration is zero; a ratio is NaN, infinite or outside
    /// `(0, 1]`; `close_below ≥ open_at`; `close_after_successes >
    /// half_open_probes`; or neither trigger is configured.
    pub fn new(config: BreakerConfig) -> Result<Breaker, ConfigError> {
        Settings::validate(&config, &BREAKER_FIELDS).map(Breaker::from_settings)
    }

    pub(super) fn from_settings(settings: Settings) -> Breaker {
        Breaker {
            state: closed(&settings),
            settings,
            epoch: 0,
            reopenings: 0,
        }
    }

    /// The current state. An open arm whose break has passed still reads
    /// `Open` until the next [`admit`](Breaker::admit) moves it.
    pub fn state(&self) -> BreakerState {
        match self.state {
            State::Closed { .. } => BreakerState::Closed,
            State::Open { .. } => BreakerState::Open,
            State::HalfOpen { .. } => BreakerState::HalfOpen,
        }
    }

    /// The current epoch; it increases with every state change.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// When the arm entered its current state, or `None` while closed (a
    /// closed arm has no moment worth showing: it has always been closed
    /// or closed again after its probes).
    pub fn since(&self) -> Option<Instant> {
        match self.state {
            State::Closed { .. } => None,
            State::Open { since, .. } | State::HalfOpen { since, .. } => Some(since),
        }
    }

    /// Counted consecutive failures of a closed arm since its last success,
    /// or `None` unless closed.
    pub fn consecutive_failures(&self) -> Option<u32> {
        match self.state {
            State::Closed { consecutive, .. } => Some(consecutive),
            _ => None,
        }
    }

    /// When an open arm will admit probes again, or `None` unless open.
    pub fn open_until(&self) -> Option<Instant> {
        match self.state {
            State::Open { until, .. } => Some(until),
            _ => None,
        }
    }

    /// Decides whether a call may proceed at `now`.
    ///
    /// Closed: accepted. Open before its break has passed: rejected with the
    /// remaining break as `retry_after`. Open after it: the arm half-opens
    /// and this call is its first probe. Half-open: accepted as a probe while
    /// a slot is free, else rejected.
    pub fn admit(&mut self, now: Instant) -> Admission {
        let probes = self.settings.half_open_probes;
        match &mut self.state {
            State::Closed { .. } => self.accept(false, Transition::Unchanged),
            State::Open { since, until } => {
                if now < *until {
                    return reject(until.saturating_duration_since(now), Transition::Unchanged);
                }
                let open_for = now.saturating_duration_since(*since);
                self.state = State::HalfOpen {
                    since: now,
                    admitted: 1,
                    successes: 0,
                    failures: 0,
                };
                self.epoch = self.epoch.wrapping_add(1);
                self.accept(true, Transition::HalfOpened { open_for, probes })
            }
            State::HalfOpen {
                since,
                admitted,
                successes,
                failures,
            } => {
                if *admitted < probes {
                    *admitted += 1;
                    return self.accept(true, Transition::Unchanged);
                }
                let waited = now.saturating_duration_since(*since);
                let transition = if waited >= self.settings.half_open_max_wait {
                    let reason = OpenReason::ProbesUnanswered {
                        admitted: *admitted,
                        reported: successes.saturating_add(*failures),
                        waited,
                    };
                    self.open(reason, now)
                } else {
                    Transition::Unchanged
                };
                reject(self.settings.break_duration, transition)
            }
        }
    }

    /// Reports that an admitted call succeeded.
    pub fn on_success(&mut self, permit: Permit, now: Instant) -> Transition {
        if !self.is_current(&permit) {
            return Transition::Unchanged;
        }
        match &mut self.state {
            State::Closed {
                consecutive,
                window,
            } => {
                *consecutive = 0;
                match window {
                    Some(window) => {
                        window.record(now, false);
                        match ratio_trip(window, self.settings.ratio, now) {
                            Some(reason) => self.open(reason, now),
                            None => Transition::Unchanged,
                        }
                    }
                    None => Transition::Unchanged,
                }
            }
            // No permit is issued while open, so none can be current here.
            State::Open { .. } => Transition::Unchanged,
            State::HalfOpen {
                successes,
                failures,
                ..
            } => {
                *successes = successes.saturating_add(1);
                let (successes, failures) = (*successes, *failures);
                self.apply(self.judge(successes, failures), now)
            }
        }
    }

    /// Reports that an admitted call failed in `category`.
    ///
    /// A category that does not count for breakers is
    /// [ignored](Breaker::on_ignored): it frees a probe slot and changes no
    /// count.
    pub fn on_failure(&mut self, permit: Permit, category: Category, now: Instant) -> Transition {
        if !category.counts_for_breaker() {
            self.on_ignored(permit);
            return Transition::Unchanged;
        }
        if !self.is_current(&permit) {
            return Transition::Unchanged;
        }
        match &mut self.state {
            State::Closed {
                consecutive,
                window,
            } => {
                *consecutive = consecutive.saturating_add(1);
                if let Some(window) = window.as_mut() {
                    window.record(now, true);
                }
                let reason = match (self.settings.consecutive_failures, window) {
                    (Some(threshold), _) if *consecutive >= threshold => {
                        Some(OpenReason::ConsecutiveFailures {
                            count: *consecutive,
                            threshold,
                        })
                    }
                    (_, Some(window)) => ratio_trip(window, self.settings.ratio, now),
                    _ => None,
                };
                match reason {
                    Some(reason) => self.open(reason, now),
                    None => Transition::Unchanged,
                }
            }
            State::Open { .. } => Transition::Unchanged,
            State::HalfOpen {
                successes,
                failures,
                ..
            } => {
                *failures = failures.saturating_add(1);
                let (successes, failures) = (*successes, *failures);
                let reopen = match self.settings.ratio {
                    None => true,
                    Some(ratio) => share(failures, successes + failures) >= ratio.open_at.get(),
                };
                let verdict = if reopen {
                    Verdict::Reopen(OpenReason::ProbeFailed {
                        successes,
                        failures,
                    })
                } else {
                    self.judge(successes, failures)
                };
                self.apply(verdict, now)
            }
        }
    }

    /// Reports that an admitted call ended without saying anything about the
    /// target's health (cancelled, refused by another mechanism before it was
    /// sent). Frees the probe slot of a half-open probe; otherwise a no-op.
    pub fn on_ignored(&mut self, permit: Permit) {
        if !self.is_current(&permit) {
            return;
        }
        if let State::HalfOpen {
            admitted,
            successes,
            failures,
            ..
        } = &mut self.state
        {
            let reported = successes.saturating_add(*failures);
            *admitted = admitted.saturating_sub(1).max(reported);
        }
    }

    /// Reports an outcome as a `Result`: `Ok` is a success, `Err` a failure
    /// judged by its category.
    pub fn on_outcome(
        &mut self,
        permit: Permit,
        outcome: Result<(), &Failure>,
        now: Instant,
    ) -> Transition {
        match outcome {
            Ok(()) => self.on_success(permit, now),
            Err(failure) => self.on_failure(permit, failure.category(), now),
        }
    }

    fn is_current(&self, permit: &Permit) -> bool {
        permit.epoch == self.epoch
    }

    fn accept(&self, probe: bool, transition: Transition) -> Admission {
        Admission {
            admit: Admit::Accepted(Permit {
                epoch: self.epoch,
                probe,
            }),
            transition,
        }
    }

    /// The half-open verdict once probes have reported `successes` and
    /// `failures`, after the reopen test for a failure.
    fn judge(&self, successes: u32, failures: u32) -> Verdict {
        let reported = successes.saturating_add(failures);
        let ratio_ok = match self.settings.ratio {
            // Without a ratio trigger a probe failure has already reopened.
            None => failures == 0,
            Some(ratio) => share(failures, reported) < ratio.close_below.get(),
        };
        if successes >= self.settings.close_after_successes && ratio_ok {
            Verdict::Close
        } else if reported >= self.settings.half_open_probes {
            Verdict::Reopen(OpenReason::ProbesInconclusive {
                successes,
                failures,
                needed_successes: self.settings.close_after_successes,
            })
        } else {
            Verdict::Pending
        }
    }

    fn apply(&mut self, verdict: Verdict, now: Instant) -> Transition {
        match verdict {
            Verdict::Pending => Transition::Unchanged,
            Verdict::Reopen(reason) => self.open(reason, now),
            Verdict::Close => {
                let (probe_successes, probe_failures) = match self.state {
                    State::HalfOpen {
                        successes,
                        failures,
                        ..
                    } => (successes, failures),
                    _ => (0, 0),
                };
                self.state = closed(&self.settings);
                self.epoch = self.epoch.wrapping_add(1);
                Transition::Closed {
                    probe_successes,
                    probe_failures,
                }
            }
        }
    }

    fn open(&mut self, reason: OpenReason, now: Instant) -> Transition {
        // From half-open the recovery was not shown: the break doubles (up
        // to max_break_duration). From closed it starts again.
        self.reopenings = match self.state {
            State::HalfOpen { .. } => self.reopenings.saturating_add(1),
            _ => 0,
        };
        let break_duration = self.break_after(self.reopenings);
        let until = now + break_duration;
        self.state = State::Open { since: now, until };
        self.epoch = self.epoch.wrapping_add(1);
        Transition::Opened {
            reason,
            until,
            break_duration,
        }
    }
}

impl Breaker {
    /// The break after `reopenings` consecutive reopenings:
    /// `break_duration · 2^reopenings`, at most `max_break_duration`.
    fn break_after(&self, reopenings: u32) -> Duration {
        let (base, max) = (
            self.settings.break_duration,
            self.settings.max_break_duration,
        );
        let factor = 2u32.checked_pow(reopenings.min(31)).unwrap_or(u32::MAX);
        base.checked_mul(factor).map_or(max, |d| d.min(max))
    }
}

impl TryFrom<BreakerConfig> for Breaker {
    type Error = ConfigError;

    fn try_from(config: BreakerConfig) -> Result<Breaker, ConfigError> {
        Breaker::new(config)
    }
}

/// A fresh closed state: no failures, an empty window.
fn closed(settings: &Settings) -> State {
    State::Closed {
        consecutive: 0,
        window: settings.ratio.map(|r| SlidingWindow::new(r.window)),
    }
}

fn reject(retry_after: Duration, transition: Transition) -> Admission {
    Admission {
        admit: Admit::Rejected { retry_after },
        transition,
    }
}

/// `part / whole` as a float; zero for an empty whole.
fn share(part: u32, whole: u32) -> f64 {
    if whole == 0 {
        0.0
    } else {
        f64::from(part) / f64::from(whole)
    }
}

/// The ratio trigger's reason to open, if the window at `now` holds enough
/// outcomes and too many failures.
fn ratio_trip(
    window: &SlidingWindow,
    ratio: Option<RatioSettings>,
    now: Instant,
) -> Option<OpenReason> {
    let ratio = ratio?;
    let totals = window.totals(now);
    let share = share(totals.failures, totals.total);
    (totals.total >= ratio.min_throughput && share >= ratio.open_at.get()).then_some(
        OpenReason::FailureRatio {
            failures: totals.failures,
            total: totals.total,
            ratio: share,
            open_at: ratio.open_at.get(),
            window: ratio.window,
            min_throughput: ratio.min_throughput,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::breaker::config::FailureRatioConfig;

    fn at(secs: u64) -> Instant {
        Instant::from_origin(Duration::from_secs(secs))
    }

    fn secs(secs: u64) -> Duration {
        Duration::from_secs(secs)
    }

    fn breaker(edit: impl FnOnce(&mut BreakerConfig)) -> Breaker {
        let mut config = BreakerConfig::default();
        edit(&mut config);
        Breaker::new(config).unwrap()
    }

    /// Ratio trigger only: open at 0.5 over 10 s with 4 outcomes minimum,
    /// close below 0.2; 5 probes, 3 successes to close.
    /// Opens `breaker` (one failure opens it) at `now`; the break it got.
    fn open_once(breaker: &mut Breaker, now: Instant) -> Duration {
        match fail(breaker, now) {
            Transition::Opened { break_duration, .. } => break_duration,
            other => panic!("expected an opening, got {other:?}"),
        }
    }

    #[test]
    fn consecutive_reopenings_double_the_break_up_to_its_cap_and_a_close_resets_it() {
        let mut b = breaker(|c| {
            c.consecutive_failures = Some(1);
            c.break_duration = secs(2);
            c.max_break_duration = Some(secs(10));
            c.close_after_successes = 1;
        });
        let mut now = at(0);
        let mut breaks = Vec::new();
        for _ in 0..5 {
            let d = open_once(&mut b, now);
            breaks.push(d);
            // The arm refuses until the break has passed, then probes.
            assert!(matches!(
                b.admit(now + d - Duration::from_millis(1)).admit,
                Admit::Rejected { .. }
            ));
            now = now + d;
        }
        assert_eq!(breaks, [secs(2), secs(4), secs(8), secs(10), secs(10)]);
        // A probe succeeds: closed; the next opening starts short again.
        assert!(matches!(succeed(&mut b, now), Transition::Closed { .. }));
        assert_eq!(open_once(&mut b, now), secs(2));
    }

    #[test]
    fn without_a_cap_every_break_is_break_duration() {
        let mut b = breaker(|c| {
            c.consecutive_failures = Some(1);
            c.break_duration = secs(3);
        });
        let mut now = at(0);
        for _ in 0..3 {
            assert_eq!(open_once(&mut b, now), secs(3));
            now = now + secs(3);
        }
    }

    #[test]
    fn a_cap_below_the_break_is_refused_naming_its_field() {
        let err = Breaker::new(BreakerConfig {
            max_break_duration: Some(secs(1)),
            ..BreakerConfig::default()
        })
        .unwrap_err();
        assert_eq!(err.field(), "breaker.max_break_duration");
    }

    fn ratio_breaker() -> Breaker {
        breaker(|c| {
            c.consecutive_failures = None;
            c.failure_ratio = Some(FailureRatioConfig {
                open_at: 0.5,
                close_below: 0.2,
                window: secs(10),
                min_throughput: 4,
            });
            c.half_open_probes = 5;
            c.close_after_successes = 3;
        })
    }

    fn permit(breaker: &mut Breaker, now: Instant) -> Permit {
        match breaker.admit(now).admit {
            Admit::Accepted(permit) => permit,
            Admit::Rejected { retry_after } => panic!("rejected, retry after {retry_after:?}"),
        }
    }

    fn fail(breaker: &mut Breaker, now: Instant) -> Transition {
        let permit = permit(breaker, now);
        breaker.on_failure(permit, Category::Transient, now)
    }

    fn succeed(breaker: &mut Breaker, now: Instant) -> Transition {
        let permit = permit(breaker, now);
        breaker.on_success(permit, now)
    }

    /// Opens a default breaker at `now` with 5 consecutive failures.
    fn opened(mut breaker: Breaker, now: Instant) -> Breaker {
        while breaker.state() == BreakerState::Closed {
            let _ = fail(&mut breaker, now);
        }
        assert_eq!(breaker.state(), BreakerState::Open);
        breaker
    }

    #[test]
    fn new_with_invalid_config_refuses() {
        let err = Breaker::new(BreakerConfig {
            half_open_probes: 0,
            ..BreakerConfig::default()
        })
        .unwrap_err();
        assert_eq!(
            err,
            ConfigError::Zero {
                field: "breaker.half_open_probes"
            }
        );
        assert!(Breaker::try_from(BreakerConfig::default()).is_ok());
    }

    #[test]
    fn failures_below_threshold_keep_it_closed_and_the_threshold_opens_it() {
        let mut breaker = breaker(|_| {});
        for _ in 0..4 {
            assert_eq!(fail(&mut breaker, at(1)), Transition::Unchanged);
        }
        assert_eq!(breaker.state(), BreakerState::Closed);
        let transition = fail(&mut breaker, at(1));
        assert_eq!(
            transition,
            Transition::Opened {
                reason: OpenReason::ConsecutiveFailures {
                    count: 5,
                    threshold: 5
                },
                until: at(31),
                break_duration: secs(30),
            }
        );
        assert_eq!(breaker.state(), BreakerState::Open);
        assert_eq!(breaker.open_until(), Some(at(31)));
    }

    #[test]
    fn success_when_closed_resets_consecutive_count() {
        let mut breaker = breaker(|_| {});
        for _ in 0..4 {
            let _ = fail(&mut breaker, at(1));
        }
        assert_eq!(succeed(&mut breaker, at(1)), Transition::Unchanged);
        for _ in 0..4 {
            assert_eq!(fail(&mut breaker, at(2)), Transition::Unchanged);
        }
        assert_eq!(breaker.state(), BreakerState::Closed);
    }

    #[test]
    fn uncounted_categories_never_open_it_nor_reset_the_count() {
        let mut breaker = breaker(|c| c.consecutive_failures = Some(2));
        let uncounted: Vec<Category> = Category::ALL
            .into_iter()
            .filter(|c| !c.counts_for_breaker())
            .collect();
        for category in [
            Category::Cancelled,
            Category::ContentBlocked,
            Category::InvalidArguments,
            Category::NotFound,
            Category::Conflict,
        ] {
            assert!(uncounted.contains(&category), "{category}");
        }
        for _ in 0..10 {
            for &category in &uncounted {
                let permit = permit(&mut breaker, at(1));
                assert_eq!(
                    breaker.on_failure(permit, category, at(1)),
                    Transition::Unchanged
                );
            }
        }
        assert_eq!(breaker.state(), BreakerState::Closed);
        // One counted failure, ignored outcomes, one more: they are consecutive.
        let _ = fail(&mut breaker, at(2));
        let permit = permit(&mut breaker, at(2));
        breaker.on_ignored(permit);
        assert!(matches!(
            fail(&mut breaker, at(2)),
            Transition::Opened { .. }
        ));
    }

    #[test]
    fn admit_when_open_before_break_duration_rejects() {
        let mut breaker = opened(breaker(|_| {}), at(0));
        for t in [0, 1, 15, 29] {
            let admission = breaker.admit(at(t));
            assert_eq!(admission.transition, Transition::Unchanged);
            assert_eq!(admission.admit.retry_after(), Some(secs(30 - t)));
        }
        assert_eq!(breaker.state(), BreakerState::Open);
    }

    #[test]
    fn retry_after_when_open_decreases_as_time_advances() {
        let mut breaker = opened(breaker(|_| {}), at(0));
        let mut last = Duration::MAX;
        for millis in (0..30_000).step_by(2_500) {
            let now = Instant::from_origin(Duration::from_millis(millis));
            let retry_after = breaker.admit(now).admit.retry_after().unwrap();
            assert!(retry_after < last, "{retry_after:?} !< {last:?}");
            assert_eq!(now + retry_after, at(30));
            last = retry_after;
        }
    }

    #[test]
    fn rejection_into_result_is_a_circuit_open_failure() {
        let mut breaker = opened(breaker(|_| {}), at(0));
        let failure = breaker
            .admit(at(10))
            .admit
            .into_result("search")
            .unwrap_err();
        assert_eq!(failure.category(), Category::CircuitOpen);
        assert_eq!(failure.retry_after(), Some(secs(20)));
        assert_eq!(failure.target(), "search");
        assert!(!failure.retryable());
    }

    #[test]
    fn admit_when_break_has_passed_half_opens_with_a_probe() {
        let mut breaker = opened(breaker(|_| {}), at(0));
        let admission = breaker.admit(at(30));
        assert_eq!(
            admission.transition,
            Transition::HalfOpened {
                open_for: secs(30),
                probes: 3
            }
        );
        let Admit::Accepted(permit) = admission.admit else {
            panic!("expected a probe")
        };
        assert!(permit.is_probe());
        assert_eq!(breaker.state(), BreakerState::HalfOpen);
    }

    #[test]
    fn admit_when_half_open_beyond_probe_limit_rejects() {
        let mut breaker = opened(breaker(|_| {}), at(0));
        let probes: Vec<Permit> = (0..3).map(|_| permit(&mut breaker, at(30))).collect();
        assert!(probes.iter().all(Permit::is_probe));
        let admission = breaker.admit(at(31));
        assert_eq!(admission.admit.retry_after(), Some(secs(30)));
        assert_eq!(admission.transition, Transition::Unchanged);
        // An ignored probe frees its slot.
        let mut probes = probes.into_iter();
        breaker.on_ignored(probes.next().unwrap());
        assert!(breaker.admit(at(31)).admit.is_accepted());
        assert!(!breaker.admit(at(31)).admit.is_accepted());
        // So does a probe failing in an uncounted category.
        let released = breaker.on_failure(probes.next().unwrap(), Category::Cancelled, at(32));
        assert_eq!(released, Transition::Unchanged);
        assert!(breaker.admit(at(32)).admit.is_accepted());
        assert_eq!(breaker.state(), BreakerState::HalfOpen);
    }

    #[test]
    fn half_open_after_m_probe_successes_closes_with_fresh_counts() {
        let mut breaker = opened(breaker(|_| {}), at(0));
        assert_eq!(succeed(&mut breaker, at(30)), Transition::Unchanged);
        assert_eq!(
            succeed(&mut breaker, at(31)),
            Transition::Closed {
                probe_successes: 2,
                probe_failures: 0
            }
        );
        assert_eq!(breaker.state(), BreakerState::Closed);
        for _ in 0..4 {
            assert_eq!(fail(&mut breaker, at(32)), Transition::Unchanged);
        }
    }

    #[test]
    fn half_open_probe_failure_without_ratio_reopens_for_a_new_break() {
        let mut breaker = opened(breaker(|_| {}), at(0));
        let _ = succeed(&mut breaker, at(30));
        let transition = fail(&mut breaker, at(35));
        assert_eq!(
            transition,
            Transition::Opened {
                reason: OpenReason::ProbeFailed {
                    successes: 1,
                    failures: 1
                },
                until: at(65),
                break_duration: secs(30),
            }
        );
        assert_eq!(breaker.admit(at(64)).admit.retry_after(), Some(secs(1)));
    }

    #[test]
    fn half_open_probes_unanswered_past_max_wait_reopen() {
        let mut breaker = opened(breaker(|c| c.half_open_max_wait = secs(60)), at(0));
        let _lost: Vec<Permit> = (0..3).map(|_| permit(&mut breaker, at(30))).collect();
        assert_eq!(breaker.admit(at(89)).transition, Transition::Unchanged);
        let admission = breaker.admit(at(90));
        assert!(!admission.admit.is_accepted());
        assert_eq!(
            admission.transition,
            Transition::Opened {
                reason: OpenReason::ProbesUnanswered {
                    admitted: 3,
                    reported: 0,
                    waited: secs(60)
                },
                until: at(120),
                break_duration: secs(30),
            }
        );
    }

    #[test]
    fn stale_permit_from_closed_epoch_is_ignored_after_opening() {
        let mut breaker = breaker(|c| c.consecutive_failures = Some(1));
        let slow = permit(&mut breaker, at(0));
        let _ = fail(&mut breaker, at(1));
        assert_eq!(breaker.open_until(), Some(at(31)));
        // The slow call fails late: the arm is neither extended nor reopened.
        assert_eq!(
            breaker.on_failure(slow, Category::Timeout, at(20)),
            Transition::Unchanged
        );
        assert_eq!(breaker.open_until(), Some(at(31)));
    }

    #[test]
    fn stale_permit_does_not_count_as_a_probe() {
        let mut breaker = breaker(|c| c.consecutive_failures = Some(1));
        let slow = permit(&mut breaker, at(0));
        let _ = fail(&mut breaker, at(0));
        let probe = permit(&mut breaker, at(30));
        assert_eq!(breaker.on_success(slow, at(31)), Transition::Unchanged);
        assert_eq!(breaker.on_success(probe, at(31)), Transition::Unchanged);
        // Two probe successes are needed; the stale one did not count.
        assert_eq!(breaker.state(), BreakerState::HalfOpen);
        assert!(matches!(
            succeed(&mut breaker, at(32)),
            Transition::Closed { .. }
        ));
    }

    #[test]
    fn every_transition_starts_a_new_epoch() {
        let mut breaker = breaker(|c| c.consecutive_failures = Some(1));
        assert_eq!(breaker.epoch(), 0);
        let _ = fail(&mut breaker, at(0));
        assert_eq!(breaker.epoch(), 1);
        let _ = succeed(&mut breaker, at(30));
        assert_eq!(breaker.epoch(), 2);
        let _ = succeed(&mut breaker, at(30));
        assert_eq!(breaker.epoch(), 3);
        assert_eq!(breaker.state(), BreakerState::Closed);
    }

    #[test]
    fn ratio_below_min_throughput_keeps_it_closed() {
        let mut breaker = ratio_breaker();
        for _ in 0..3 {
            assert_eq!(fail(&mut breaker, at(1)), Transition::Unchanged);
        }
        assert_eq!(breaker.state(), BreakerState::Closed);
        let transition = fail(&mut breaker, at(1));
        assert_eq!(
            transition,
            Transition::Opened {
                reason: OpenReason::FailureRatio {
                    failures: 4,
                    total: 4,
                    ratio: 1.0,
                    open_at: 0.5,
                    window: secs(10),
                    min_throughput: 4,
                },
                until: at(31),
                break_duration: secs(30),
            }
        );
    }

    #[test]
    fn ratio_below_open_at_keeps_it_closed_and_reaching_it_opens() {
        let mut breaker = ratio_breaker();
        for _ in 0..3 {
            let _ = succeed(&mut breaker, at(1));
        }
        for _ in 0..2 {
            assert_eq!(fail(&mut breaker, at(1)), Transition::Unchanged);
        }
        // 2 of 5 = 0.4 < 0.5; the third failure makes 3 of 6 = 0.5.
        let Transition::Opened { reason, .. } = fail(&mut breaker, at(1)) else {
            panic!("expected to open")
        };
        assert!(matches!(
            reason,
            OpenReason::FailureRatio {
                failures: 3,
                total: 6,
                ..
            }
        ));
    }

    #[test]
    fn ratio_failures_older_than_the_window_slide_out() {
        let mut breaker = ratio_breaker();
        for _ in 0..3 {
            let _ = fail(&mut breaker, at(0));
        }
        // At 11 s the three failures have left the 10 s window.
        assert_eq!(fail(&mut breaker, at(11)), Transition::Unchanged);
        for _ in 0..2 {
            assert_eq!(fail(&mut breaker, at(12)), Transition::Unchanged);
        }
        assert_eq!(breaker.state(), BreakerState::Closed);
        assert!(matches!(
            fail(&mut breaker, at(12)),
            Transition::Opened { .. }
        ));
    }

    #[test]
    fn ratio_mode_success_that_reaches_min_throughput_can_open() {
        let mut breaker = ratio_breaker();
        for _ in 0..3 {
            let _ = fail(&mut breaker, at(1));
        }
        assert!(matches!(
            succeed(&mut breaker, at(1)),
            Transition::Opened {
                reason: OpenReason::FailureRatio {
                    failures: 3,
                    total: 4,
                    ..
                },
                ..
            }
        ));
    }

    #[test]
    fn hysteresis_probe_ratio_between_thresholds_neither_closes_nor_reopens_until_probes_run_out() {
        let mut breaker = opened(ratio_breaker(), at(0));
        // Probes: S S F S → ratio 1/4 = 0.25, between close_below 0.2 and
        // open_at 0.5, with 3 ≥ 3 successes: no verdict yet.
        assert_eq!(succeed(&mut breaker, at(30)), Transition::Unchanged);
        assert_eq!(succeed(&mut breaker, at(30)), Transition::Unchanged);
        assert_eq!(fail(&mut breaker, at(30)), Transition::Unchanged);
        assert_eq!(succeed(&mut breaker, at(30)), Transition::Unchanged);
        assert_eq!(breaker.state(), BreakerState::HalfOpen);
        // The fifth probe succeeds: 1/5 = 0.2, still not below 0.2.
        assert_eq!(
            succeed(&mut breaker, at(31)),
            Transition::Opened {
                reason: OpenReason::ProbesInconclusive {
                    successes: 4,
                    failures: 1,
                    needed_successes: 3
                },
                until: at(61),
                break_duration: secs(30),
            }
        );
    }

    #[test]
    fn hysteresis_probe_ratio_below_close_below_closes() {
        let mut breaker = opened(ratio_breaker(), at(0));
        assert_eq!(succeed(&mut breaker, at(30)), Transition::Unchanged);
        assert_eq!(succeed(&mut breaker, at(30)), Transition::Unchanged);
        assert_eq!(
            succeed(&mut breaker, at(30)),
            Transition::Closed {
                probe_successes: 3,
                probe_failures: 0
            }
        );
    }

    #[test]
    fn ratio_mode_probe_ratio_at_open_at_reopens() {
        let mut breaker = opened(ratio_breaker(), at(0));
        let _ = succeed(&mut breaker, at(30));
        let transition = fail(&mut breaker, at(30));
        assert!(matches!(
            transition,
            Transition::Opened {
                reason: OpenReason::ProbeFailed {
                    successes: 1,
                    failures: 1
                },
                ..
            }
        ));
    }

    #[test]
    fn closing_resets_the_window() {
        let mut breaker = opened(ratio_breaker(), at(0));
        for _ in 0..3 {
            let _ = succeed(&mut breaker, at(30));
        }
        assert_eq!(breaker.state(), BreakerState::Closed);
        for _ in 0..3 {
            assert_eq!(fail(&mut breaker, at(31)), Transition::Unchanged);
        }
    }

    #[test]
    fn on_outcome_judges_failures_by_category() {
        let mut breaker = breaker(|c| c.consecutive_failures = Some(1));
        let p = permit(&mut breaker, at(0));
        let cancelled = Failure::new("search", Category::Cancelled);
        assert_eq!(
            breaker.on_outcome(p, Err(&cancelled), at(0)),
            Transition::Unchanged
        );
        let p = permit(&mut breaker, at(0));
        assert_eq!(breaker.on_outcome(p, Ok(()), at(0)), Transition::Unchanged);
        let p = permit(&mut breaker, at(0));
        let timeout = Failure::new("search", Category::Timeout);
        assert!(breaker.on_outcome(p, Err(&timeout), at(0)).is_change());
    }

    #[test]
    fn transitions_serialize_with_their_rationale_and_display_for_humans() {
        let mut breaker = ratio_breaker();
        for _ in 0..3 {
            assert!(!fail(&mut breaker, at(1)).is_change());
        }
        let transition = fail(&mut breaker, at(1));
        let json = serde_json::to_value(&transition).unwrap();
        assert_eq!(json["transition"], "opened");
        assert_eq!(json["reason"]["kind"], "failure_ratio");
        assert_eq!(json["reason"]["failures"], 4);
        assert_eq!(json["reason"]["total"], 4);
        assert_eq!(json["reason"]["window"], "10s");
        assert_eq!(json["break_duration"], "30s");
        assert_eq!(
            transition.to_string(),
            "opened for 30s: 4 of 4 calls failed in the last 10s (ratio 1.00, threshold 0.5)"
        );
        assert_eq!(transition.state_after(), Some(BreakerState::Open));
        assert_eq!(
            serde_json::to_value(Transition::Unchanged).unwrap()["transition"],
            "unchanged"
        );
        assert_eq!(
            serde_json::to_string(&BreakerState::HalfOpen).unwrap(),
            "\"half_open\""
        );
        assert_eq!(breaker.state().to_string(), "open");
    }
}
