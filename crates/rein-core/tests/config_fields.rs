//! Every config field rein accepts has an effect someone can observe, or
//! `rein check` refuses it with the reason (issue 15, item 5).
//!
//! # How
//!
//! The fields are not listed by hand: each table's field list is read from
//! its serde derive (a table with an unknown key `__probe` is refused with
//! "expected one of `a`, `b`, …" — every table refuses unknown fields), for
//! every table path in [`TABLES`]. Each field must then have an entry in
//! [`EFFECTS`]:
//!
//! - [`Effect::Observed`]: the test that observes what the field changes
//!   (an event, a request, a result, a refusal at run time), named as
//!   `file::function`; this test checks the function exists in that file;
//! - [`Effect::Refused`]: a snippet setting the field, which `rein check`
//!   must refuse under that field's path with a message holding the reason;
//! - [`Effect::Table`]: a sub-table, whose own fields are enumerated (it
//!   must be in [`TABLES`]).
//!
//! A field added to a config struct without an entry fails
//! `every_config_field_has_an_observed_effect_or_is_refused`, naming it: a
//! setting that is parsed and never honoured cannot come back unnoticed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use rein_core::registry::{ConfigFile, ConfigSource, check};

/// How a field's effect is observed.
enum Effect {
    /// By this test (`crates/<crate>/<path>::<fn>`), which observes it as
    /// the text says.
    Observed(&'static str, &'static str),
    /// `rein check` refuses this snippet (merged into the base config)
    /// naming the field, with a message containing the text.
    Refused(&'static str, &'static str),
    /// A table whose fields are listed under its own path.
    Table,
    /// Owed by another piece of work, named; only the fields in [`OWED`].
    Owed(&'static str),
}

use Effect::{Observed, Owed, Refused, Table};

/// Every table of the config, as a path (`*` for a name, `[]` for an array
/// item) and a snippet that puts the unknown key `__probe` in it.
const TABLES: &[(&str, &str)] = &[
    ("", "__probe = 1"),
    ("providers.*", "[providers.p]\n__probe = 1"),
    ("providers.*.stream", "[providers.p.stream]\n__probe = 1"),
    (
        "providers.*.prices.*",
        "[providers.p.prices.m]\n__probe = 1",
    ),
    ("models.*", "[models.m]\n__probe = 1"),
    (
        "models.*.fallbacks[]",
        "[models.m]\nfallbacks = [{ __probe = 1 }]",
    ),
    ("resource_groups.*", "[resource_groups.g]\n__probe = 1"),
    ("tools.*", "[tools.t]\n__probe = 1"),
    ("tools.*.idempotency", "[tools.t.idempotency]\n__probe = 1"),
    (
        "tools.*.compensation",
        "[tools.t.compensation]\n__probe = 1",
    ),
    ("tools.*.latency", "[tools.t.latency]\n__probe = 1"),
    ("tools.*.adapter", "[tools.t.adapter]\n__probe = 1"),
    ("agents.*", "[agents.a]\n__probe = 1"),
    ("agents.*.budget", "[agents.a.budget]\n__probe = 1"),
    ("agents.*.retry", "[agents.a.retry]\n__probe = 1"),
    ("agents.*.loop_guard", "[agents.a.loop_guard]\n__probe = 1"),
    (
        "agents.*.model_retry",
        "[agents.a.model_retry]\n__probe = 1",
    ),
    ("agents.*.fan_out", "[agents.a.fan_out]\n__probe = 1"),
    ("agents.*.approval", "[agents.a.approval]\n__probe = 1"),
    ("breakers", "[breakers]\n__probe = 1"),
    ("breakers.*", "[breakers.tool]\n__probe = 1"),
    (
        "breakers.*.failure_ratio",
        "[breakers.tool.failure_ratio]\n__probe = 1",
    ),
    ("server", "[server]\n__probe = 1"),
    ("server.idempotency", "[server.idempotency]\n__probe = 1"),
    ("server.queue", "[server.queue]\n__probe = 1"),
    (
        "server.reconciliation",
        "[server.reconciliation]\n__probe = 1",
    ),
    ("server.agent_graph", "[server.agent_graph]\n__probe = 1"),
    ("server.api_keys[]", "[[server.api_keys]]\n__probe = 1"),
    ("server.limits", "[server.limits]\n__probe = 1"),
    ("server.cors", "[server.cors]\n__probe = 1"),
];

/// Every field, and how its effect is observed.
const EFFECTS: &[(&str, Effect)] = &[
    // ----- the file's sections
    ("providers", Table),
    ("models", Table),
    ("resource_groups", Table),
    ("tools", Table),
    ("agents", Table),
    ("breakers", Table),
    ("server", Table),
    // ----- [providers.NAME]
    (
        "providers.*.kind",
        Observed(
            RUN_LOOP_OPENAI,
            "which API the turns are sent to: OpenAI Chat Completions here",
        ),
    ),
    (
        "providers.*.base_url",
        Observed(
            RUN_LOOP_OPENAI,
            "the mock model at that address answers the turns",
        ),
    ),
    (
        "providers.*.api_key_env",
        Observed(
            STREAM_KEYS,
            "the key read from it is sent as the bearer/x-api-key header",
        ),
    ),
    (
        "providers.*.timeout",
        Observed(
            "crates/rein-engine/tests/provider_stream.rs::the_allowance_caps_a_stream_that_keeps_sending",
            "a call is cut at its allowance, which the timeout bounds",
        ),
    ),
    (
        "providers.*.script",
        Observed(
            "crates/rein-cli/tests/run.rs::run_with_the_scripted_provider_succeeds_without_faults",
            "the turns replayed are the script's",
        ),
    ),
    ("providers.*.prices", Table),
    (
        "providers.*.prices.*.input_per_mtok_usd",
        Observed(
            COST_CEILING,
            "turns are charged at the price, so the cost ceiling ends the run",
        ),
    ),
    (
        "providers.*.prices.*.output_per_mtok_usd",
        Observed(
            COST_CEILING,
            "turns are charged at the price, so the cost ceiling ends the run",
        ),
    ),
    (
        "providers.*.max_concurrency",
        Observed(
            "crates/rein-engine/tests/model_chain.rs::calls_over_a_providers_limit_wait_in_line_and_never_exceed_it",
            "calls over it wait in line (model_queue_waited)",
        ),
    ),
    ("providers.*.stream", Table),
    (
        "providers.*.stream.first_byte_timeout",
        Observed(
            "crates/rein-engine/tests/provider_stream.rs::headers_then_silence_is_cut_at_the_first_byte_limit",
            "a stream without a first byte in time is cut",
        ),
    ),
    (
        "providers.*.stream.idle_timeout",
        Observed(
            "crates/rein-engine/tests/provider_stream.rs::stall_after_some_events_is_cut_at_the_idle_limit",
            "a stream that stalls is cut",
        ),
    ),
    // ----- [models.ALIAS]
    (
        "models.*.provider",
        Observed(
            BINDING_CHAIN,
            "the binding's agents ask that provider first",
        ),
    ),
    (
        "models.*.model",
        Observed(BINDING_CHAIN, "the binding's agents ask that model first"),
    ),
    (
        "models.*.fallbacks",
        Observed(
            "crates/rein-engine/tests/model_chain.rs::transient_failures_move_the_turn_to_the_next_link_and_say_so",
            "a transient failure moves the turn on (model_fallback_used)",
        ),
    ),
    (
        "models.*.fallbacks[].provider",
        Observed(
            "crates/rein-engine/tests/model_chain.rs::transient_failures_move_the_turn_to_the_next_link_and_say_so",
            "the backup link's provider answers",
        ),
    ),
    (
        "models.*.fallbacks[].model",
        Observed(
            "crates/rein-engine/tests/model_chain.rs::transient_failures_move_the_turn_to_the_next_link_and_say_so",
            "the backup link's model answers",
        ),
    ),
    (
        "models.*.context_fallbacks",
        Observed(CONTEXT_FALLBACK, "an overflow goes to the larger window"),
    ),
    // ----- [resource_groups.NAME]
    (
        "resource_groups.*.rate_per_sec",
        Observed(
            FAN_OUT_36,
            "calls are spread at the desk: at most burst + rate × t",
        ),
    ),
    (
        "resource_groups.*.burst",
        Observed(FAN_OUT_36, "the first burst goes at once, the rest wait"),
    ),
    (
        "resource_groups.*.max_concurrency",
        Observed(
            "crates/rein-engine/tests/run_loop.rs::resource_group_ceiling_bounds_concurrent_attempts_and_the_run_still_succeeds",
            "peak concurrency at the desk stays at the ceiling",
        ),
    ),
    // ----- [tools.NAME]
    (
        "tools.*.description",
        Observed(
            "crates/rein-engine/tests/config.rs::example_order_desk_config_loads_with_env_injected",
            "the model-facing description the model is offered",
        ),
    ),
    (
        "tools.*.class",
        Observed(
            "crates/rein-engine/tests/run_loop.rs::irreversible_tool_is_never_retried",
            "an irreversible tool is never retried, an idempotent write is looked up by key",
        ),
    ),
    (
        "tools.*.schema",
        Observed(
            "crates/rein-engine/tests/run_loop.rs::unknown_tools_and_invalid_arguments_never_reach_the_tool_service",
            "arguments that break it never reach the tool",
        ),
    ),
    (
        "tools.*.resource_group",
        Observed(
            "crates/rein-engine/tests/config.rs::bound_agent_carries_the_concurrency_ceilings_of_its_tools_groups",
            "the tool shares its group's ceiling and bucket",
        ),
    ),
    (
        "tools.*.side_effect_tier",
        Observed(
            DECLARED,
            "named in tool_call_started and beside each effect of a handoff package",
        ),
    ),
    (
        "tools.*.owner",
        Observed(
            DECLARED,
            "named in tool_call_started and beside each effect of a handoff package",
        ),
    ),
    (
        "tools.*.avoid_at_plan_time",
        Observed(
            "crates/rein-engine/tests/config.rs::example_order_desk_config_loads_with_env_injected",
            "the model is told to avoid the tool in its description",
        ),
    ),
    (
        "tools.*.self_heal_allowance",
        Observed(
            "crates/rein-core/src/loop_guard/state.rs::on_failure_per_tool_override_replaces_the_allowance",
            "the tool is disabled after that many failures (tool_disabled)",
        ),
    ),
    (
        "tools.*.resource_key",
        Observed(
            "crates/rein-engine/tests/fan_out.rs::writes_to_the_same_order_run_one_at_a_time_in_the_models_order",
            "writes of one turn to the same value run one at a time",
        ),
    ),
    ("tools.*.idempotency", Table),
    (
        "tools.*.idempotency.volatile_fields",
        Observed(
            "crates/rein-core/src/idempotency/canonical.rs::canonical_json_drops_underscore_and_volatile_fields_at_every_depth",
            "the fields do not change the idempotency key",
        ),
    ),
    (
        "tools.*.idempotency.case_insensitive_fields",
        Observed(
            "crates/rein-core/src/idempotency/canonical.rs::case_insensitive_fields_fold_strings_at_any_depth",
            "case does not change the idempotency key",
        ),
    ),
    (
        "tools.*.idempotency.header",
        Observed(
            "crates/rein-engine/tests/run_loop.rs::lost_response_on_idempotent_write_applies_once_via_lookup_by_key",
            "the key travels in that header and the desk collapses the retry",
        ),
    ),
    ("tools.*.compensation", Table),
    (
        "tools.*.compensation.tool",
        Observed(COMPENSATES, "that tool undoes the effect"),
    ),
    (
        "tools.*.compensation.grade",
        Observed(
            "crates/rein-engine/tests/run_loop.rs::failed_weak_compensation_ends_manual_with_a_handoff_package",
            "a weak compensation that fails ends manual",
        ),
    ),
    (
        "tools.*.compensation.window",
        Observed(
            "crates/rein-cli/tests/crash.rs::reconcile_flags_effects_past_their_window_or_contradicted_by_the_tool",
            "an effect past its window is not undone automatically",
        ),
    ),
    (
        "tools.*.compensation.args",
        Observed(
            COMPENSATES,
            "the restore is called with the forward call's order and previous date",
        ),
    ),
    ("tools.*.latency", Table),
    (
        "tools.*.latency.mode",
        Owed("observe mode: the `latency` helper measures it"),
    ),
    (
        "tools.*.latency.p50",
        Observed(
            "crates/rein-core/src/retry/decision.rs::remainder_below_one_median_attempt_gives_up_now",
            "no retry is started without time for one median attempt",
        ),
    ),
    (
        "tools.*.latency.p95",
        Observed(
            "crates/rein-core/src/tool.rs::latency_profile_refuses_unordered_quantiles",
            "a profile with p95 outside [p50, p99] is refused",
        ),
    ),
    (
        "tools.*.latency.p99",
        Observed(
            "crates/rein-engine/tests/governor.rs::a_write_shed_for_lack_of_time_is_never_sent_and_leaves_no_pending_record",
            "a write needs p99 × 2 before it is sent, else it is shed",
        ),
    ),
    (
        "tools.*.latency.samples",
        Owed(
            "a declared profile's sample count: the `latency` helper's observed profiles compare against it",
        ),
    ),
    (
        "tools.*.latency.fallback_p99",
        Owed("observe mode: the `latency` helper measures it"),
    ),
    (
        "tools.*.latency.min_samples",
        Owed("observe mode: the `latency` helper measures it"),
    ),
    ("tools.*.adapter", Table),
    (
        "tools.*.adapter.kind",
        Observed(
            "crates/rein-engine/tests/command_tool.rs::a_command_that_prints_json_succeeds_with_the_call_in_its_environment",
            "a command tool runs a program instead of an HTTP call",
        ),
    ),
    (
        "tools.*.adapter.url",
        Observed(RUN_LOOP_LOOKUP, "calls go to the desk at that URL"),
    ),
    (
        "tools.*.adapter.method",
        Observed(
            "crates/rein-core/src/registry/tests.rs::http_adapter_refuses_command_settings",
            "the method the HTTP target is built with",
        ),
    ),
    (
        "tools.*.adapter.headers",
        Observed(
            "crates/rein-engine/src/tool/http.rs::a_hand_built_target_echoing_its_credential_header_returns_it_redacted",
            "the header is sent with every call",
        ),
    ),
    (
        "tools.*.adapter.status_url",
        Observed(RUN_LOOP_LOOKUP, "a lost answer is looked up there by key"),
    ),
    (
        "tools.*.adapter.max_result_bytes",
        Observed(
            "crates/rein-engine/src/tool/http.rs::oversized_results_keep_scalar_key_fields_and_say_so",
            "a larger result is cut and says so",
        ),
    ),
    (
        "tools.*.adapter.program",
        Observed(
            "crates/rein-engine/tests/command_tool.rs::a_program_that_cannot_start_is_not_applied_and_leaves_nothing",
            "the program run; one that cannot start fails not_applied",
        ),
    ),
    (
        "tools.*.adapter.args",
        Observed(
            "crates/rein-engine/tests/command_tool.rs::a_command_that_prints_json_succeeds_with_the_call_in_its_environment",
            "the program gets its arguments",
        ),
    ),
    (
        "tools.*.adapter.working_dir",
        Observed(
            "crates/rein-core/src/registry/tests.rs::command_adapter_resolves_paths_against_the_config_file",
            "the directory the program runs in",
        ),
    ),
    (
        "tools.*.adapter.env",
        Observed(
            "crates/rein-engine/tests/command_tool.rs::a_command_that_prints_json_succeeds_with_the_call_in_its_environment",
            "the variables the program sees",
        ),
    ),
    (
        "tools.*.adapter.max_output_bytes",
        Observed(
            "crates/rein-engine/tests/command_tool.rs::oversized_output_is_truncated_with_a_note",
            "larger output is cut with a note",
        ),
    ),
    (
        "tools.*.adapter.agent",
        Observed(CHILD_RUN, "the child run is of that agent"),
    ),
    (
        "tools.*.adapter.budget_ratio",
        Observed(
            "crates/rein-engine/tests/config.rs::agent_tool_binds_to_a_child_agent_target",
            "the child's share of the caller's budget",
        ),
    ),
    (
        "tools.*.adapter.max_tokens",
        Observed(
            "crates/rein-engine/tests/config.rs::agent_tool_binds_to_a_child_agent_target",
            "a cap on the child's tokens",
        ),
    ),
    (
        "tools.*.adapter.max_steps",
        Observed(
            "crates/rein-engine/tests/config.rs::agent_tool_binds_to_a_child_agent_target",
            "a cap on the child's steps",
        ),
    ),
    (
        "tools.*.adapter.wall_clock",
        Observed(
            "crates/rein-engine/tests/config.rs::agent_tool_binds_to_a_child_agent_target",
            "a cap on the child's time",
        ),
    ),
    (
        "tools.*.adapter.max_cost_usd",
        Observed(
            "crates/rein-engine/tests/config.rs::agent_tool_binds_to_a_child_agent_target",
            "a cap on the child's cost",
        ),
    ),
    // ----- [agents.NAME]
    (
        "agents.*.provider",
        Observed(RUN_LOOP_OPENAI, "the turns go to that provider"),
    ),
    (
        "agents.*.model",
        Observed(RUN_LOOP_OPENAI, "the request names that model"),
    ),
    (
        "agents.*.fallbacks",
        Observed(
            "crates/rein-engine/tests/model_chain.rs::a_provider_that_keeps_failing_is_not_asked_once_its_circuit_opened",
            "the agent's own links are tried after a transient failure",
        ),
    ),
    (
        "agents.*.context_fallbacks",
        Observed(CONTEXT_FALLBACK, "an overflow goes to the larger window"),
    ),
    (
        "agents.*.system_prompt",
        Observed(RUN_LOOP_OPENAI, "the first message of every request"),
    ),
    (
        "agents.*.tools",
        Observed(
            "crates/rein-engine/tests/run_loop.rs::unknown_tools_and_invalid_arguments_never_reach_the_tool_service",
            "a tool not offered is refused, never called",
        ),
    ),
    (
        "agents.*.on_failure",
        Observed(
            "crates/rein-engine/tests/run_loop.rs::continue_policy_keeps_effects_and_reports_partial_success",
            "continue keeps effects instead of undoing them",
        ),
    ),
    (
        "agents.*.compensation_reserve",
        Observed(
            "crates/rein-server/tests/startup_ranges.rs::every_field_at_every_extreme_starts_or_is_refused_by_name",
            "the forward path runs on the rest of the wall clock (refused outside [0, 0.9])",
        ),
    ),
    ("agents.*.budget", Table),
    (
        "agents.*.budget.wall_clock",
        Observed(
            "crates/rein-engine/tests/run_loop.rs::wall_clock_ceiling_ends_the_run_budget_exhausted",
            "the run ends budget_exhausted at it",
        ),
    ),
    (
        "agents.*.budget.max_steps",
        Observed(
            "crates/rein-engine/tests/run_loop.rs::step_ceiling_ends_the_run_budget_exhausted_with_its_report",
            "the run ends budget_exhausted at it",
        ),
    ),
    (
        "agents.*.budget.max_tokens",
        Observed(
            "crates/rein-engine/tests/run_loop.rs::token_ceiling_ends_the_run_before_its_proposed_calls_run",
            "the run ends budget_exhausted at it",
        ),
    ),
    (
        "agents.*.budget.max_cost_usd",
        Observed(COST_CEILING, "the run ends budget_exhausted at it"),
    ),
    ("agents.*.retry", Table),
    (
        "agents.*.retry.max_attempts",
        Observed(
            "crates/rein-core/src/retry/decision.rs::attempt_ceiling_gives_up",
            "no attempt past it",
        ),
    ),
    (
        "agents.*.retry.base_delay",
        Observed(
            "crates/rein-core/src/retry/decision.rs::local_delay_is_full_jitter_within_the_ceiling",
            "the backoff's base",
        ),
    ),
    (
        "agents.*.retry.max_delay",
        Observed(
            "crates/rein-core/src/retry/decision.rs::local_delay_is_full_jitter_within_the_ceiling",
            "the backoff's ceiling",
        ),
    ),
    (
        "agents.*.retry.budget_ratio",
        Observed(
            "crates/rein-core/tests/retry_props.rs::retry_budget_caps_retries_at_a_share_of_requests",
            "retries stay within that share of requests",
        ),
    ),
    (
        "agents.*.retry.budget_initial",
        Observed(
            "crates/rein-core/tests/retry_props.rs::retry_budget_caps_retries_at_a_share_of_requests",
            "the retries allowed before any request earned one",
        ),
    ),
    (
        "agents.*.retry.budget_max",
        Observed(
            "crates/rein-core/tests/retry_props.rs::retry_budget_caps_retries_at_a_share_of_requests",
            "the most retries saved up",
        ),
    ),
    ("agents.*.loop_guard", Table),
    (
        "agents.*.loop_guard.max_repeats",
        Observed(
            "crates/rein-core/src/loop_guard/state.rs::observe_same_action_one_past_max_repeats_trips",
            "the run stops on the repetition past it",
        ),
    ),
    (
        "agents.*.loop_guard.no_progress_window",
        Observed(
            "crates/rein-engine/tests/run_loop.rs::no_progress_loop_stops_at_its_window",
            "the run stops after that many steps without progress",
        ),
    ),
    (
        "agents.*.loop_guard.repeat_failure_threshold",
        Observed(
            "crates/rein-engine/tests/run_loop.rs::repeated_identical_failure_stops_at_its_threshold",
            "the run stops at the repeated failure past it",
        ),
    ),
    (
        "agents.*.loop_guard.self_heal_allowance",
        Observed(
            "crates/rein-core/src/loop_guard/state.rs::on_failure_one_past_allowance_disables_the_tool_once",
            "a tool is disabled after that many failures",
        ),
    ),
    (
        "agents.*.loop_guard.self_heal_overrides",
        Observed(
            "crates/rein-core/src/loop_guard/state.rs::on_failure_per_tool_override_replaces_the_allowance",
            "a tool's own allowance replaces the agent's",
        ),
    ),
    ("agents.*.model_retry", Table),
    (
        "agents.*.model_retry.max_retries",
        Observed(MODEL_RETRY, "no model retry past it in one run"),
    ),
    (
        "agents.*.model_retry.max_wait",
        Observed(
            MODEL_RETRY,
            "no model retry once the run waited that long in total",
        ),
    ),
    (
        "agents.*.model_retry.max_wasted_tokens",
        Observed(
            MODEL_RETRY,
            "no model retry once failed calls consumed that many tokens",
        ),
    ),
    ("agents.*.fan_out", Table),
    (
        "agents.*.fan_out.max_calls_per_turn",
        Observed(
            "crates/rein-engine/tests/fan_out.rs::a_turn_over_the_cap_runs_none_of_its_calls_and_tells_the_model_to_batch",
            "a turn over it runs none of its calls (fan_out_refused)",
        ),
    ),
    ("agents.*.approval", Table),
    (
        "agents.*.approval.from_tier",
        Refused(
            "[agents.a.approval]\nfrom_tier = \"high\"",
            "rein has no approval step yet",
        ),
    ),
    // ----- [breakers] and [breakers.KIND]
    (
        "breakers.provider",
        Observed(
            "crates/rein-engine/tests/model_chain.rs::a_provider_that_keeps_failing_is_not_asked_once_its_circuit_opened",
            "an open provider arm is not called",
        ),
    ),
    (
        "breakers.tool",
        Observed(
            "crates/rein-engine/tests/run_loop.rs::open_breaker_refuses_calls_and_tells_the_model_not_to_retry",
            "an open tool arm refuses its calls",
        ),
    ),
    (
        "breakers.resource_group",
        Observed(
            "crates/rein-core/tests/breaker_props.rs::breaker_arms_are_independent",
            "a group's arm opens and refuses apart from the others",
        ),
    ),
    (
        "breakers.cost",
        Observed(
            COST_ARM,
            "an open cost arm refuses the account's model calls unsent",
        ),
    ),
    (
        "breakers.*.consecutive_failures",
        Observed(
            "crates/rein-core/src/breaker/state.rs::failures_below_threshold_keep_it_closed_and_the_threshold_opens_it",
            "the arm opens at that count",
        ),
    ),
    (
        "breakers.*.break_duration",
        Observed(
            "crates/rein-core/src/breaker/state.rs::admit_when_open_before_break_duration_rejects",
            "an open arm refuses for that long",
        ),
    ),
    (
        "breakers.*.half_open_probes",
        Observed(
            "crates/rein-core/src/breaker/state.rs::admit_when_half_open_beyond_probe_limit_rejects",
            "no more probes at once",
        ),
    ),
    (
        "breakers.*.close_after_successes",
        Observed(
            "crates/rein-core/src/breaker/state.rs::half_open_after_m_probe_successes_closes_with_fresh_counts",
            "the arm closes after that many probe successes",
        ),
    ),
    (
        "breakers.*.half_open_max_wait",
        Observed(
            "crates/rein-core/src/breaker/state.rs::half_open_probes_unanswered_past_max_wait_reopen",
            "unanswered probes reopen the arm after it",
        ),
    ),
    ("breakers.*.failure_ratio", Table),
    (
        "breakers.*.failure_ratio.open_at",
        Observed(
            "crates/rein-core/src/breaker/state.rs::ratio_below_open_at_keeps_it_closed_and_reaching_it_opens",
            "the arm opens at that ratio",
        ),
    ),
    (
        "breakers.*.failure_ratio.close_below",
        Observed(
            "crates/rein-core/src/breaker/state.rs::hysteresis_probe_ratio_below_close_below_closes",
            "probes must fail below it to close",
        ),
    ),
    (
        "breakers.*.failure_ratio.window",
        Observed(
            "crates/rein-core/src/breaker/state.rs::ratio_failures_older_than_the_window_slide_out",
            "older outcomes no longer count",
        ),
    ),
    (
        "breakers.*.failure_ratio.min_throughput",
        Observed(
            "crates/rein-core/src/breaker/state.rs::ratio_below_min_throughput_keeps_it_closed",
            "no ratio opens the arm with fewer outcomes",
        ),
    ),
    // ----- [server]
    (
        "server.listen",
        Observed(
            "crates/rein-cli/tests/serve.rs::serve_announces_its_address_and_answers",
            "the server answers there",
        ),
    ),
    (
        "server.body_limit",
        Observed(
            "crates/rein-server/tests/api.rs::bad_bodies_are_structured_400s_and_oversized_ones_413",
            "a larger body is 413",
        ),
    ),
    (
        "server.shutdown_grace",
        Observed(
            "crates/rein-cli/tests/drain.rs::sigterm_with_a_long_grace_lets_the_sync_run_finish_in_the_draining_process",
            "runs finish within it, or are handed on",
        ),
    ),
    (
        "server.allowed_hosts",
        Observed(
            "crates/rein-cli/tests/exposure.rs::allowed_hosts_are_served_and_others_are_421",
            "listed hosts are served, others 421",
        ),
    ),
    ("server.cors", Table),
    (
        "server.cors.allowed_origins",
        Observed(CORS, "listed origins get the CORS headers, others 403"),
    ),
    (
        "server.cors.allowed_methods",
        Observed(CORS, "only those methods are allowed"),
    ),
    (
        "server.cors.allowed_headers",
        Observed(CORS, "only those headers are allowed"),
    ),
    (
        "server.metrics",
        Observed(METRICS, "open metrics need no key"),
    ),
    (
        "server.metrics_tenants",
        Observed(METRICS, "only those tenants' keys read /metrics"),
    ),
    (
        "server.api_keys",
        Observed(
            "crates/rein-server/tests/api.rs::keys_are_required_and_tenants_see_only_their_runs",
            "each key acts for its tenant",
        ),
    ),
    (
        "server.api_keys[].tenant",
        Observed(
            "crates/rein-server/tests/api.rs::keys_are_required_and_tenants_see_only_their_runs",
            "the key's runs are that tenant's",
        ),
    ),
    (
        "server.api_keys[].sha256",
        Observed(
            "crates/rein-server/tests/api.rs::keys_are_required_and_tenants_see_only_their_runs",
            "a key whose digest is listed is admitted, another is 401",
        ),
    ),
    (
        "server.api_keys[].name",
        Observed(
            "crates/rein-cli/tests/redaction.rs::canary_secrets_appear_nowhere_rein_writes",
            "the label logs show instead of the key",
        ),
    ),
    ("server.idempotency", Table),
    (
        "server.idempotency.enabled",
        Observed(
            "crates/rein-server/tests/api.rs::a_key_while_idempotency_is_disabled_is_501_and_nothing_runs",
            "a key while disabled is 501",
        ),
    ),
    (
        "server.idempotency.max_key_length",
        Observed(
            "crates/rein-server/tests/api.rs::inputs_the_api_fuzzer_found_are_answered_as_documented",
            "a longer key is refused",
        ),
    ),
    (
        "server.idempotency.retention",
        Observed(
            "crates/rein-server/tests/api.rs::idempotency_keys_follow_the_table_exactly",
            "a completed submission replays within it",
        ),
    ),
    ("server.queue", Table),
    (
        "server.queue.lease",
        Observed(
            "crates/rein-cli/tests/drain.rs::a_killed_servers_queued_run_is_taken_over_before_its_lease_expires",
            "a dead worker's run is taken over after it",
        ),
    ),
    (
        "server.queue.max_attempts",
        Observed(
            "crates/rein-server/tests/api.rs::abandoned_queued_work_is_taken_over_or_dead_lettered",
            "a run delivered that often is dead-lettered",
        ),
    ),
    (
        "server.queue.workers",
        Observed(
            "crates/rein-server/tests/api.rs::queued_runs_are_accepted_then_driven_and_stream_their_events",
            "that many workers drive queued runs",
        ),
    ),
    ("server.reconciliation", Table),
    (
        "server.reconciliation.heartbeat_interval",
        Observed(ORPHANED, "a live run records it is alive that often"),
    ),
    (
        "server.reconciliation.orphan_threshold",
        Observed(ORPHANED, "a silent run is closed orphaned after it"),
    ),
    (
        "server.reconciliation.scan_interval",
        Observed(ORPHANED, "the scan for orphans runs that often"),
    ),
    (
        "server.reconciliation.max_runs_per_scan",
        Observed(
            "crates/rein-server/tests/api.rs::takeover_is_not_stalled_by_many_older_runs_it_must_pass_over",
            "a scan closes at most that many",
        ),
    ),
    ("server.agent_graph", Table),
    (
        "server.agent_graph.max_depth",
        Observed(TREE_BOUNDS, "a child deeper than it is refused"),
    ),
    (
        "server.agent_graph.max_total_tokens",
        Observed(TREE_BOUNDS, "the tree's tokens are bounded"),
    ),
    (
        "server.agent_graph.max_total_runs",
        Observed(TREE_BOUNDS, "children past it are refused"),
    ),
    ("server.limits", Table),
    (
        "server.limits.header_timeout",
        Observed(SLOW_CLIENTS, "a slow head is cut"),
    ),
    (
        "server.limits.body_timeout",
        Observed(
            "crates/rein-cli/tests/slow_clients.rs::an_idle_keep_alive_connection_and_a_half_sent_body_are_cut",
            "a stalled body is 408",
        ),
    ),
    (
        "server.limits.idle_timeout",
        Observed(
            "crates/rein-cli/tests/slow_clients.rs::an_idle_keep_alive_connection_and_a_half_sent_body_are_cut",
            "an idle connection is closed",
        ),
    ),
    (
        "server.limits.max_connections",
        Observed(
            "crates/rein-cli/tests/slow_clients.rs::connections_over_the_limit_each_get_a_whole_503_and_are_counted",
            "connections over it get 503",
        ),
    ),
];

const RUN_LOOP_OPENAI: &str = "crates/rein-engine/tests/run_loop.rs::openai_compatible_model_only_ever_sees_structured_placeholders";
const RUN_LOOP_LOOKUP: &str = "crates/rein-engine/tests/run_loop.rs::lost_response_on_idempotent_write_applies_once_via_lookup_by_key";
const STREAM_KEYS: &str = "crates/rein-engine/tests/provider_stream.rs::keys_and_versions_are_sent";
const COST_CEILING: &str =
    "crates/rein-engine/tests/run_loop.rs::cost_ceiling_ends_the_run_budget_exhausted";
const BINDING_CHAIN: &str = "crates/rein-engine/tests/config.rs::a_model_binding_gives_its_agents_their_chain_prices_and_provider_ceilings";
const CONTEXT_FALLBACK: &str = "crates/rein-engine/tests/model_chain.rs::a_context_overflow_goes_to_a_larger_window_and_never_to_the_same_model";
const FAN_OUT_36: &str = "crates/rein-engine/tests/governor.rs::a_fan_out_of_36_never_exceeds_the_groups_bucket_at_the_desk";
const DECLARED: &str = "crates/rein-engine/tests/declared.rs::owner_and_tier_reach_tool_events_and_the_handoff_package";
const COMPENSATES: &str = "crates/rein-engine/tests/run_loop.rs::non_retryable_failure_compensates_earlier_writes_in_reverse_order";
const CHILD_RUN: &str = "crates/rein-engine/tests/agent_tree.rs::a_child_run_answers_its_parent_and_is_recorded_under_it";
const MODEL_RETRY: &str = "crates/rein-engine/tests/run_loop.rs::model_retries_have_a_ceiling_per_run_apart_from_each_calls_policy";
const COST_ARM: &str = "crates/rein-engine/tests/cost_arm.rs::paid_failures_open_the_cost_arm_and_the_next_run_is_refused_unsent";
const CORS: &str = "crates/rein-cli/tests/exposure.rs::cors_admits_its_origins_with_their_methods_and_headers_only";
const METRICS: &str = "crates/rein-cli/tests/exposure.rs::metrics_need_a_listed_tenants_key_when_keys_exist_unless_open";
const ORPHANED: &str =
    "crates/rein-cli/tests/serve.rs::a_killed_servers_direct_run_is_closed_as_orphaned";
const TREE_BOUNDS: &str = "crates/rein-engine/tests/agent_tree.rs::children_past_the_trees_bounds_are_refused_with_a_structured_failure";
const SLOW_CLIENTS: &str = "crates/rein-cli/tests/slow_clients.rs::three_hundred_stalled_connections_neither_stop_healthz_nor_outlive_their_timeouts";

/// The fields another piece of work owes an effect (issue 15 gives
/// latency's observe mode to its own change). An `Owed` entry for any
/// other field fails the test.
const OWED: &[&str] = &[
    "tools.*.latency.mode",
    "tools.*.latency.samples",
    "tools.*.latency.fallback_p99",
    "tools.*.latency.min_samples",
];

/// The fields of the table `probe` reaches, from serde's refusal of the
/// unknown key.
fn fields_of(path: &str, probe: &str) -> Vec<String> {
    let err = toml::from_str::<ConfigFile>(probe)
        .err()
        .unwrap_or_else(|| panic!("table `{path}` accepted an unknown field"));
    let message = err.message().to_owned();
    assert!(
        message.contains("unknown field `__probe`"),
        "table `{path}`: {message}"
    );
    let Some((_, expected)) = message.split_once("expected") else {
        return Vec::new();
    };
    expected
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// Where the workspace is.
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn every_config_field_has_an_observed_effect_or_is_refused() {
    let mut wrong = Vec::new();
    let mut every = BTreeSet::new();
    for (table, probe) in TABLES {
        for field in fields_of(table, probe) {
            let path = if table.is_empty() {
                field
            } else {
                format!("{table}.{field}")
            };
            every.insert(path);
        }
    }
    let known: BTreeSet<&str> = EFFECTS.iter().map(|(p, _)| *p).collect();
    // The list, field → how its effect is observed (`--nocapture` shows it).
    for (path, effect) in EFFECTS {
        match effect {
            Observed(test, how) => println!("{path}: {how} ({test})"),
            Refused(_, reason) => println!("{path}: refused by rein check ({reason})"),
            Owed(why) => println!("{path}: OWED — {why}"),
            Table => {}
        }
    }
    for path in &every {
        if !known.contains(path.as_str()) {
            wrong.push(format!(
                "`{path}` has no effect listed: name the test that observes it, or make `rein check` refuse it"
            ));
        }
    }
    for (path, effect) in EFFECTS {
        if !every.contains(*path) {
            wrong.push(format!("`{path}` is listed but no config table has it"));
            continue;
        }
        match effect {
            Table => {
                let table = TABLES.iter().any(|(t, _)| {
                    t == path
                        || t.strip_suffix(".*") == Some(path)
                        || t.strip_suffix("[]") == Some(path)
                });
                if !table {
                    wrong.push(format!("`{path}` is a table, but TABLES does not list it"));
                }
            }
            Owed(_) => {
                if !OWED.contains(path) {
                    wrong.push(format!(
                        "`{path}` is owed an effect, but only {OWED:?} may be"
                    ));
                }
            }
            Observed(test, _) => {
                let (file, function) = test.split_once("::").unwrap();
                let text = std::fs::read_to_string(workspace().join(file)).unwrap_or_default();
                if !text.contains(&format!("fn {function}(")) {
                    wrong.push(format!("`{path}`: no test `{function}` in {file}"));
                }
            }
            Refused(snippet, reason) => {
                if let Some(problem) = refusal(path, snippet, reason) {
                    wrong.push(problem);
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A config `rein check` accepts, which each refusal's snippet extends.
const BASE: &str = r#"
[providers.p]
kind = "openai"
base_url = "http://127.0.0.1:9/v1"

[resource_groups.g]

[tools.t]
description = "Look an order up."
class = "idempotent_write"
resource_group = "g"
side_effect_tier = "low"
owner = "team"
schema = { type = "object", properties = { id = { type = "string", description = "The id." } }, required = ["id"], additionalProperties = false }
latency = { p50 = "5ms", p95 = "10ms", p99 = "20ms" }
adapter = { kind = "http", url = "http://127.0.0.1:9/t" }

[agents.a]
provider = "p"
model = "m"
tools = ["t"]
"#;

fn checked(text: &str) -> Result<(), Vec<rein_core::registry::ConfigProblem>> {
    let config: ConfigFile = toml::from_str(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    check(&[ConfigSource::new("rein.toml", config)], &|_| Vec::new()).map(|_| ())
}

/// `None` when `rein check` refuses `snippet` under `path` (its `*` and
/// `[]` filled as the snippet fills them) with a message holding `reason`.
fn refusal(path: &str, snippet: &str, reason: &str) -> Option<String> {
    let text = format!("{BASE}\n{snippet}");
    match checked(&text) {
        Ok(()) => Some(format!("`{path}`: rein check accepts\n{snippet}")),
        Err(problems) => {
            let pattern: Vec<&str> = path.split('.').collect();
            let hit = problems.iter().any(|p| {
                let field: Vec<&str> = p.field.split('.').collect();
                field.len() == pattern.len()
                    && field.iter().zip(&pattern).all(|(f, want)| {
                        *want == "*" || f == want || want.trim_end_matches("[]") == *f
                    })
                    && p.message.contains(reason)
            });
            (!hit).then(|| format!("`{path}`: refused otherwise than expected: {problems:?}"))
        }
    }
}

#[test]
fn the_base_config_is_accepted() {
    checked(BASE).unwrap();
}
