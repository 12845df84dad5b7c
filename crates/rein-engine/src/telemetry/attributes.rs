//! The attribute names of rein's spans: the OpenTelemetry GenAI semantic
//! conventions for model calls and tool executions, and `rein.*` for the
//! correlation fields and rein's own decisions.

/// What a GenAI span does: `chat` for a model call, `execute_tool` for a
/// tool attempt.
pub const GEN_AI_OPERATION_NAME: &str = "gen_ai.operation.name";
/// The model provider (the semantic conventions' older name).
pub const GEN_AI_SYSTEM: &str = "gen_ai.system";
/// The model provider (the semantic conventions' current name).
pub const GEN_AI_PROVIDER_NAME: &str = "gen_ai.provider.name";
/// The model asked.
pub const GEN_AI_REQUEST_MODEL: &str = "gen_ai.request.model";
/// The model that answered.
pub const GEN_AI_RESPONSE_MODEL: &str = "gen_ai.response.model";
/// Prompt tokens.
pub const GEN_AI_USAGE_INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
/// Completion tokens.
pub const GEN_AI_USAGE_OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
/// Why the model stopped.
pub const GEN_AI_RESPONSE_FINISH_REASONS: &str = "gen_ai.response.finish_reasons";
/// The tool a tool span executes.
pub const GEN_AI_TOOL_NAME: &str = "gen_ai.tool.name";
/// The failure's category, on a span that failed.
pub const ERROR_TYPE: &str = "error.type";

/// `chat`: a model call.
pub const OPERATION_CHAT: &str = "chat";
/// `execute_tool`: a tool attempt.
pub const OPERATION_EXECUTE_TOOL: &str = "execute_tool";

/// The run (correlation field).
pub const RUN_ID: &str = "rein.run_id";
/// The step (correlation field).
pub const STEP: &str = "rein.step";
/// The planned action (correlation field).
pub const INTENT_ID: &str = "rein.intent_id";
/// The attempt's id (correlation field).
pub const ATTEMPT_ID: &str = "rein.attempt_id";
/// The idempotency key (correlation field).
pub const IDEMPOTENCY_KEY: &str = "rein.idempotency_key";
/// The tenant of the run.
pub const TENANT: &str = "rein.tenant";
/// The agent of the run.
pub const AGENT: &str = "rein.agent";
/// The attempt's number, from 1.
pub const ATTEMPT: &str = "rein.attempt";
/// The tool's class.
pub const TOOL_CLASS: &str = "rein.tool.class";
/// The tool (of a compensation).
pub const TOOL: &str = "rein.tool";
/// Whether a failed attempt may have applied.
pub const EFFECT: &str = "rein.effect";
/// How the run ended.
pub const OUTCOME: &str = "rein.outcome";
/// The steps the run took.
pub const STEPS: &str = "rein.steps";
/// How a compensation ended.
pub const COMPENSATION_STATUS: &str = "rein.compensation.status";
