//! Conformance checks of a run's trace context ([`NewRun::trace_parent`],
//! [`StepCommit::first_span`]).

use super::{BASE_MS, ms, new_run};
use crate::{NewRun, RunFilter, SpanRef, StepCommit, Store};

const CALLER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const FIRST: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
const LATER: &str = "00-5b8aa5a2d2c872e8321cf37308d69df2-051581bf3cb55c13-00";

/// A run created with its caller's `traceparent` reads it back (alone and
/// in a listing); the span of its first drive is stored by the first
/// commit that names one, and a later commit's never replaces it. A run
/// created without a context has none.
pub async fn run_trace_context_is_stored_and_its_first_span_set_once(store: &dyn Store) {
    let caller = SpanRef::parse_traceparent(CALLER).unwrap();
    let base = new_run("traced", BASE_MS);
    let run = NewRun {
        trace_parent: Some(caller.clone()),
        // Its own agent: the listing below finds it among any number.
        agent: base.run_id.to_string(),
        ..base
    };
    let run_id = run.run_id.clone();
    let created = store.create_run(run).await.unwrap();
    assert_eq!(created.trace_parent.as_ref(), Some(&caller));
    assert_eq!(created.first_span, None);
    let read = store.get_run(&run_id).await.unwrap().unwrap();
    assert_eq!(read.trace_parent.as_ref(), Some(&caller), "read back");
    assert_eq!(read.first_span, None, "no drive yet");

    let first = SpanRef::parse_traceparent(FIRST).unwrap();
    store
        .commit_step(
            &run_id,
            StepCommit {
                first_span: Some(first.clone()),
                ..StepCommit::default()
            },
        )
        .await
        .unwrap();
    let later = SpanRef::parse_traceparent(LATER).unwrap();
    store
        .commit_step(
            &run_id,
            StepCommit {
                first_span: Some(later),
                ..StepCommit::default()
            },
        )
        .await
        .unwrap();
    let read = store.get_run(&run_id).await.unwrap().unwrap();
    assert_eq!(
        read.first_span.as_ref(),
        Some(&first),
        "set once: the first drive's"
    );
    assert_eq!(read.trace_parent.as_ref(), Some(&caller), "kept");

    let listed = store
        .list_runs_page(&RunFilter::all().of_agent(read.agent.clone()), None, 10)
        .await
        .unwrap();
    let row = listed
        .runs
        .iter()
        .find(|r| r.run_id == run_id)
        .expect("the run is listed");
    assert_eq!(row.trace_parent.as_ref(), Some(&caller));
    assert_eq!(row.first_span.as_ref(), Some(&first));

    let plain = new_run("untraced", BASE_MS + ms(1));
    let plain_id = plain.run_id.clone();
    store.create_run(plain).await.unwrap();
    let read = store.get_run(&plain_id).await.unwrap().unwrap();
    assert_eq!((read.trace_parent, read.first_span), (None, None));
}
