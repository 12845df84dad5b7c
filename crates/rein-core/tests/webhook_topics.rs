//! Which stored events a webhook is told about: every event of the wire
//! fixture (every kind and shape rein has stored) read through
//! `Topic::of`, and the two approval payloads built here.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use rein_core::approval::{ArgsDigest, Verdict};
use rein_core::event::{ApprovalDecided, ApprovalRequested, HandOn};
use rein_core::webhook::Topic;
use rein_core::{Event, EventData, EventKind, Timestamp};
use serde_json::{Value, json};

const FIXTURE: &str = include_str!("fixtures/events-v1.jsonl");

#[test]
fn only_the_six_moments_have_a_topic_and_run_finished_carries_its_outcome() {
    let mut seen = Vec::new();
    for text in FIXTURE.lines().filter(|l| !l.trim().is_empty()) {
        let event: Event = serde_json::from_str(text).unwrap();
        let wire: Value = serde_json::from_str(text).unwrap();
        let topic = Topic::of(&event.data);
        match event.kind() {
            EventKind::RunFinished => {
                let (topic, outcome) = topic.unwrap();
                assert_eq!(topic, Topic::RunFinished);
                assert_eq!(outcome.unwrap().as_str(), wire["data"]["outcome"]);
            }
            EventKind::HandoffCreated => {
                assert_eq!(topic, Some((Topic::HandoffCreated, None)));
            }
            EventKind::ApprovalRequested => {
                assert_eq!(topic, Some((Topic::ApprovalRequested, None)));
            }
            EventKind::ApprovalDecided => {
                assert_eq!(topic, Some((Topic::ApprovalDecided, None)));
            }
            // A decision is sent; an attempt that failed decided nothing.
            EventKind::HandoffDecided => {
                let decided = wire["data"]["failed"].is_null();
                assert_eq!(
                    topic,
                    decided.then_some((Topic::HandoffDecided, None)),
                    "{text}"
                );
            }
            EventKind::BreakerStateChanged => {
                let opened = wire["data"]["transition"]["transition"] == "opened";
                assert_eq!(
                    topic,
                    opened.then_some((Topic::BreakerOpened, None)),
                    "{text}"
                );
            }
            other => assert_eq!(topic, None, "{other} is not a webhook topic"),
        }
        if let Some((topic, _)) = topic {
            seen.push(topic);
        }
    }
    for expected in [
        Topic::ApprovalRequested,
        Topic::ApprovalDecided,
        Topic::RunFinished,
        Topic::HandoffCreated,
        Topic::HandoffDecided,
        Topic::BreakerOpened,
    ] {
        assert!(seen.contains(&expected), "the fixture has a {expected}");
    }

    let requested: EventData = ApprovalRequested {
        tool: "refund_order".to_owned(),
        args_digest: ArgsDigest::of(&json!({"amount": 1500})),
        why: "args.amount is above 1000".to_owned(),
        tier: None,
        expires_at_ms: Timestamp::from_millis(10),
        continue_with: HandOn::AnyWorker,
    }
    .into();
    assert_eq!(
        Topic::of(&requested),
        Some((Topic::ApprovalRequested, None))
    );
    let decided: EventData = ApprovalDecided {
        tool: "refund_order".to_owned(),
        verdict: Verdict::Rejected,
        by: "alice".to_owned(),
        decided_at_ms: Timestamp::from_millis(20),
        reason: Some("wrong buyer".to_owned()),
        waited_ms: u64::try_from(Duration::from_secs(3).as_millis()).unwrap(),
    }
    .into();
    assert_eq!(Topic::of(&decided), Some((Topic::ApprovalDecided, None)));
}
