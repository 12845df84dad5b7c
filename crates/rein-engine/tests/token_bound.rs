//! Issue 32, item 2: a token ceiling is used rather than feared. The prompt
//! bound of a model rein has no tokenizer for divides the prompt's bytes by
//! the bytes per token its provider was seen to count (the least seen less
//! a margin), instead of counting a token per byte.
//!
//! The model is the testkit's mock over loopback, metered: it counts a
//! prompt as one token per four bytes of the request's `messages` and
//! `tools` JSON, rounded up (`rein_testkit::mock_model::BYTES_PER_TOKEN`),
//! its own way, not rein's, and cuts an answer at the `max_tokens` it is
//! sent. Its usage log is the provider's side of the account.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Harness, agent, kinds, pause_safe, run};
use rein_core::{EventKind, Outcome};
use rein_engine::provider::OpenAiProvider;
use rein_engine::run::{AgentBinding, Encoding, Engine};
use rein_store::Store;
use rein_store_sqlite::SqliteStore;
use rein_testkit::mock_model::{MockModel, MockModelConfig, Reply};
use rein_testkit::order_desk::{GET_ORDER, Order, OrderDesk, OrderDeskConfig};
use serde_json::json;

/// The token ceiling of the run.
const CEILING: u64 = 3_000;

/// Orders whose lookup answers about 800 characters of JSON each.
fn big_orders() -> Vec<Order> {
    (1..=4)
        .map(|n| {
            let mut order = Order::new(
                &format!("B-{n}"),
                "confirmed",
                "2026-12-20",
                "buyer@example.com",
            );
            for i in 0..11 {
                order = order.with_item(&format!("SKU-{n}-{i:03}"), "Garden chair, teak", 2);
            }
            order
        })
        .collect()
}

async fn harness() -> Harness {
    let desk = OrderDesk::start_with(OrderDeskConfig::default().with_orders(big_orders()))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sqlite: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("rein.db")).unwrap());
    let store: Arc<dyn Store> = Arc::new(pause_safe(sqlite));
    let engine = Engine::builder(store.clone()).rng_seed(7).build().unwrap();
    Harness {
        desk,
        store,
        engine,
        _dir: dir,
    }
}

fn asking(desk: &OrderDesk, model: &MockModel) -> AgentBinding {
    let provider = Arc::new(OpenAiProvider::new(
        "mock",
        &model.openai_base_url(),
        None,
        Duration::from_secs(5),
        rein_engine::run::http_client().unwrap(),
    ));
    let mut a = agent(desk, provider, true);
    a.tool_definitions = vec![json!({"type": "function", "function": {
        "name": GET_ORDER, "description": "Look up one order by its id.",
        "parameters": {"type": "object", "properties": {
            "order_id": {"type": "string", "description": "the order"}}}}})];
    a.max_output_tokens = Some(16_384);
    a.budget = a.budget.with_tokens(CEILING).unwrap();
    // The loop runs until the ceiling stops it, no last turn planned.
    a.planner = a.planner.with_final_turn(false);
    a
}

/// Three lookups of ~800 characters each, then an answer wordier than
/// anything left (the mock cuts it at the `max_tokens` rein sends): the
/// loop spends at least 85 % of the ceiling and never passes it, by the
/// provider's count. (Issue 32 measured the same shape of loop stopping at
/// 27 % with a token per byte of everything added.)
#[tokio::test(start_paused = true)]
async fn a_loop_under_3000_tokens_uses_most_of_them_and_never_more() {
    spend_the_ceiling("mock-model", MockModelConfig::with_metered_usage).await;
}

/// The same loop to `gpt-4o-mini`, whose provider counts as OpenAI's
/// cookbook documents for the family (`o200k_base` tokens of each
/// message's texts, 3 per message, the function rule for tools): rein
/// bounds it with the family's tokenizer, and the loop uses most of the
/// ceiling and never more.
#[tokio::test(start_paused = true)]
async fn a_gpt_4o_loop_bounded_by_its_tokenizer_uses_most_of_the_ceiling() {
    read_o200k();
    spend_the_ceiling("gpt-4o-mini", MockModelConfig::with_tokenized_usage).await;
}

/// Reads `o200k_base` before the run: a run's calls never wait for an
/// encoding (they are bounded by the learned ratio until it is read), so a
/// test of what the tokenizer bounds reads it first, as a process that has
/// served a while has.
fn read_o200k() {
    assert!(Encoding::O200kBase.load(), "o200k_base cannot be read");
}

async fn spend_the_ceiling(model_name: &str, metering: fn(MockModelConfig) -> MockModelConfig) {
    let h = harness().await;
    let mut replies: Vec<Reply> = (1..=3)
        .map(|n| Reply::tool_call(GET_ORDER, &json!({"order_id": format!("B-{n}")})))
        .collect();
    replies.push(Reply::text("Here is everything about the four orders.").with_usage(0, 50_000));
    let model = MockModel::start_with(metering(
        MockModelConfig::new(replies).with_output_cap(model_name, 16_384),
    ))
    .await
    .unwrap();
    let mut a = asking(&h.desk, &model);
    a.model = model_name.to_owned();
    let out = run(&h, &a).await;

    let result_chars: Vec<usize> = model
        .requests()
        .last()
        .map(|r| {
            r.body["messages"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|m| m["role"] == "tool")
                .map(|m| m["content"].as_str().unwrap_or_default().len())
                .collect()
        })
        .unwrap_or_default();
    let usage = model.usage_log();
    let counted: u64 = usage
        .iter()
        .map(|u| u.prompt_tokens + u.completion_tokens)
        .sum();
    eprintln!(
        "tool results {result_chars:?} chars; per call (prompt, output, max_tokens): {:?}; counted {counted} of {CEILING}",
        usage
            .iter()
            .map(|u| (u.prompt_tokens, u.completion_tokens, u.max_tokens))
            .collect::<Vec<_>>()
    );
    assert!(
        result_chars.iter().all(|c| (700..=900).contains(c)),
        "{result_chars:?}"
    );
    assert_eq!(h.desk.request_count(GET_ORDER), 3, "{:#?}", out.report);
    assert_eq!(usage.len(), 4, "every turn was asked");
    assert!(counted <= CEILING, "the provider counted {counted}");
    assert_eq!(out.report.consumed.tokens, counted);
    // The last turn took all but the bound's slack of what was left.
    assert!(
        counted * 100 >= CEILING * 85,
        "{counted} of {CEILING}: the bound feared the ceiling"
    );
    assert_eq!(
        out.report.outcome,
        Outcome::BudgetExhausted,
        "the answer was cut at the ceiling: {:#?}",
        out.report
    );
    // Every call's prompt was bounded from above: what each left for
    // output plus what the provider counted never passed what was left.
    let mut left = CEILING;
    for u in &usage {
        let asked = u.max_tokens.unwrap();
        assert!(asked + u.prompt_tokens <= left, "{asked} + {u:?} > {left}");
        left -= u.prompt_tokens + u.completion_tokens;
    }
    // The bound of the last prompt was within a fifth of the count.
    let last = usage.last().unwrap();
    let bound = usage[..usage.len() - 1]
        .iter()
        .fold(CEILING, |l, u| l - u.prompt_tokens - u.completion_tokens)
        - last.max_tokens.unwrap();
    assert!(
        bound * 100 <= last.prompt_tokens * 120,
        "bound {bound} for a prompt counted {}",
        last.prompt_tokens
    );
    let events = kinds(&h, &out).await;
    assert!(
        events
            .iter()
            .all(|(k, _)| *k != EventKind::FinalTurnRequested),
        "the loop was not cut short by the planner"
    );
}

/// The first prompt of a run, before any count of the model was seen: a
/// token per byte for a model rein has no tokenizer for, its tokens for
/// `gpt-4o-mini` (within a fifth of the provider's count, where a token
/// per byte is about four times it).
#[tokio::test(start_paused = true)]
async fn a_tokenizer_bounds_the_first_prompt_close_to_the_count() {
    read_o200k();
    let h = harness().await;
    let model = MockModel::start_with(
        MockModelConfig::new([Reply::text("done")])
            .with_output_cap("gpt-4o-mini", 16_384)
            .with_tokenized_usage(),
    )
    .await
    .unwrap();
    let mut a = asking(&h.desk, &model);
    a.model = "gpt-4o-mini".into();
    a.tool_definitions.clear();
    let out = run(&h, &a).await;
    assert_eq!(out.report.outcome, Outcome::Succeeded, "{:#?}", out.report);
    let usage = model.usage_log();
    let first = &usage[0];
    let bound = CEILING - first.max_tokens.unwrap();
    assert!(
        bound >= first.prompt_tokens,
        "bound {bound} below the count {}",
        first.prompt_tokens
    );
    // The allowance of 16 template tokens a message (3 counted) is most
    // of the slack of a short prompt.
    let messages = model.requests()[0].body["messages"]
        .as_array()
        .unwrap()
        .len() as u64;
    assert!(
        bound <= first.prompt_tokens + 16 * messages + 16,
        "bound {bound} for a prompt counted {} in {messages} messages",
        first.prompt_tokens
    );
}

/// A server that names its model `gpt-4o-mini` but counts otherwise (a
/// token per four bytes of the request's JSON, more than the encoding's
/// tokens for long prose) is caught by its first answer: from then on the
/// model is bounded by the learned ratio, above the server's count.
#[tokio::test(start_paused = true)]
async fn a_model_counted_above_its_encoding_is_bounded_by_its_ratio() {
    read_o200k();
    let h = harness().await;
    let model = MockModel::start_with(
        MockModelConfig::new([
            Reply::tool_call(GET_ORDER, &json!({"order_id": "B-1"})),
            Reply::text("done"),
        ])
        .with_output_cap("gpt-4o-mini", 16_384)
        .with_metered_usage(),
    )
    .await
    .unwrap();
    let mut a = asking(&h.desk, &model);
    a.model = "gpt-4o-mini".into();
    // Prose: a token per five bytes to o200k_base, one per four to this
    // server.
    a.system_prompt = "You adjust orders with care and report every word. ".repeat(80);
    // No tool definitions: their allowance would hide the short count.
    a.tool_definitions.clear();
    a.budget = a.budget.with_tokens(6_000).unwrap();
    let out = run(&h, &a).await;
    assert_eq!(out.report.outcome, Outcome::Succeeded, "{:#?}", out.report);
    let usage = model.usage_log();
    assert_eq!(usage.len(), 2);
    let bounds: Vec<u64> = usage
        .iter()
        .scan(6_000, |left, u| {
            let bound = *left - u.max_tokens.unwrap().min(*left);
            *left -= u.prompt_tokens + u.completion_tokens;
            Some(bound)
        })
        .collect();
    // The first bound trusted the name and was short; the second was not.
    assert!(
        bounds[0] < usage[0].prompt_tokens,
        "the first bound {} was not below the count {}: the test does not show the catch",
        bounds[0],
        usage[0].prompt_tokens
    );
    assert!(
        bounds[1] >= usage[1].prompt_tokens,
        "bound {} below the count {} after the model was caught",
        bounds[1],
        usage[1].prompt_tokens
    );
}

/// What one process learned, the next starts with: a run's ratios are
/// added to the store at its end, and a new engine on the same store
/// bounds the same first prompt tighter than the one token per byte it
/// would otherwise start at, and still above the provider's count.
#[tokio::test(start_paused = true)]
async fn a_second_process_starts_with_the_ratios_the_first_learned() {
    let h = harness().await;
    let model = MockModel::start_with(
        MockModelConfig::new([Reply::text("done"), Reply::text("done")])
            .with_output_cap("mock-model", 16_384)
            .with_metered_usage(),
    )
    .await
    .unwrap();
    let a = asking(&h.desk, &model);
    let first = run(&h, &a).await;
    assert_eq!(
        first.report.outcome,
        Outcome::Succeeded,
        "{:#?}",
        first.report
    );
    let learned = h.store.token_ratios().await.unwrap();
    assert_eq!(learned.len(), 1, "{learned:?}");
    assert_eq!(learned[0].model, "mock/mock-model");
    assert!(learned[0].stored.ratio.samples() >= 1);

    // Another process: a new engine on the same store, the same first
    // prompt.
    let second = Engine::builder(h.store.clone())
        .rng_seed(7)
        .build()
        .unwrap();
    let out = second
        .run(
            &a,
            &rein_engine::run::AcceptAll,
            rein_engine::run::RunRequest {
                input: "Move order A-1001 to 2026-12-24 and tell the buyer.".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(out.report.outcome, Outcome::Succeeded, "{:#?}", out.report);
    let usage = model.usage_log();
    assert_eq!(usage.len(), 2);
    let (cold, warm) = (&usage[0], &usage[1]);
    assert_eq!(cold.prompt_tokens, warm.prompt_tokens, "the same prompt");
    let (cold_bound, warm_bound) = (
        CEILING - cold.max_tokens.unwrap(),
        CEILING - warm.max_tokens.unwrap(),
    );
    assert!(
        warm_bound < cold_bound,
        "the second process bounded it at {warm_bound}, no tighter than the first's {cold_bound}"
    );
    assert!(
        warm_bound >= warm.prompt_tokens,
        "bound {warm_bound} below the provider's count {}",
        warm.prompt_tokens
    );
}
