//! `rein mcp serve`: an agent's registry tools served to any MCP client
//! over stdio, each call through the whole guarded call.
//!
//! # What a client gets by changing only its server entry
//!
//! A desktop assistant or an IDE calls tools with no deadline, no key and
//! no ledger. Served by rein, its session is one run of the agent
//! ([`RunHandle`]): its budget (steps, wall clock) bounds the session;
//! every `tools/call` is validated against the tool's schema, passes the
//! breakers and the governor of its resource group, gets its intent's
//! idempotency key, is written to the ledger before it is sent and
//! retried only as its class allows; a failure comes back as `isError`
//! with rein's structured error (category, effect, whether to retry).
//! A call that needs a human's approval waits for it, never sent without
//! one: the client's user is asked through a form when the client can
//! show one (`--approve-via client`, see `elicit`), and a decision made
//! through rein (`rein approve`, the API, the dashboard) counts as well.
//! Calls of one session are made one at a time, so the session waits too.
//! When the client disconnects, the run ends as the agent's failure policy
//! says (compensation of what a failed session left), and its report is in
//! the store (`rein runs show`).
//!
//! SIGTERM or SIGINT ends the session the same way: the client is cut off,
//! a call in flight finishes (it holds the run until it is recorded), and
//! the run ends by its policy before the process exits with 143 or 130.
//! Killed without a word, the run would stay `running` until orphan
//! recovery found it.
//!
//! # Why a call's intent is its tool and arguments
//!
//! MCP clients retry a call by sending it again as a new request; rein
//! must see the repeat as the same action, or a retried email goes out
//! twice. The intent of a call is the client's `_meta["rein/intent"]`
//! when it names one, else the tool and the digest of its normalized
//! arguments: within a session the same call is the same action, answered
//! from the ledger, not sent again. A client that means to do the same
//! thing twice names two intents.
//!
//! The annotations the client sees are derived from rein's class (a read
//! is `readOnlyHint`, an idempotent write `idempotentHint`, an
//! irreversible one `destructiveHint`), never copied from anywhere else.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Args;
use rein_core::registry::{Registry, ToolSpec};
use rein_core::{Effect, TenantId, ToolClass};
use rein_engine::run::{AgentBinding, Approver, RunHandle, RunRequest};
use rein_engine::startup::Purpose;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData,
    Implementation, ListToolsResult, PaginatedRequestParams, ProtocolVersion, ServerCapabilities,
    ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ServerHandler, ServiceExt as _};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

use super::elicit::{self, ClientApprover, InputSignal};
use crate::run::Session;

/// The `_meta` key a client may name a call's intent with.
pub const META_INTENT: &str = "rein/intent";

/// Arguments of `rein mcp serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The config: a TOML file or a directory of them.
    #[arg(long, short)]
    config: PathBuf,
    /// The agent whose tools are served; its budget bounds the session.
    #[arg(long, short)]
    agent: String,
    /// The SQLite file (or PostgreSQL URL) the session's run is recorded
    /// in, as for `rein run`.
    #[arg(long, visible_alias = "db")]
    data: Option<PathBuf>,
    /// The tenant the session's run belongs to.
    #[arg(long, default_value = "default")]
    tenant: String,
    /// Who decides a call that needs approval: `client` asks the MCP
    /// client's user through a form when the client can show one (a
    /// decision through rein counts too, the first one stands); `api`
    /// waits for `rein approve`, the API or the dashboard only.
    #[arg(long, value_enum, default_value_t = ApproveVia::Client)]
    approve_via: ApproveVia,
}

/// Who decides a served call that needs approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ApproveVia {
    /// The MCP client's user, when the client supports elicitation, or
    /// a human through rein.
    Client,
    /// A human through rein only.
    Api,
}

/// Runs `rein mcp serve` until the client closes its end or a signal stops
/// it. Exit status: 0 when the session's run succeeded (or made no call),
/// 1 when it ended otherwise (its report says how), 2 when it could not
/// start, 143 or 130 when SIGTERM or SIGINT ended it (after its run).
pub fn run(args: ServeArgs) -> Result<ExitCode> {
    let runtime = crate::run::runtime()?;
    let served = runtime.block_on(async {
        let mut signals = crate::signal::Listener::install()?;
        let startup = crate::run::start(&args.config, Purpose::Run)?;
        let data = crate::store::chosen(args.data.as_deref(), startup.registry.store());
        let mut session = Session::open(startup, &data, &args.config)?;
        let binding = session.bind(&args.agent)?;
        let tools = mcp_tools(&session.registry, &binding)?;
        let tenant = TenantId::new(args.tenant).context("invalid --tenant")?;
        // The session, its agent and its run live as long as this process
        // serves one client: made static here once, so that the MCP
        // service's tasks may hold them.
        let session: &'static Session = Box::leak(Box::new(session));
        let binding: &'static AgentBinding = Box::leak(Box::new(binding));
        let handle = session
            .engine
            .begin(
                binding,
                &session.schemas,
                RunRequest {
                    tenant: Some(tenant),
                    input: format!(
                        "MCP session over stdio: the tools of agent `{}`",
                        binding.name
                    ),
                    ..RunRequest::default()
                },
            )
            .await?;
        let run_id = handle.run_id().clone();
        crate::log::note(
            crate::log::Level::Info,
            &format!(
                "rein mcp serve: serving {} of agent `{}` as run {run_id}",
                rein_core::plural::count(tools.len(), "tool"),
                binding.name
            ),
        );
        let server = McpServer {
            inner: Arc::new(Inner {
                binding,
                tools,
                approve_via: args.approve_via,
                run: tokio::sync::Mutex::new(Some(handle)),
            }),
        };
        let running = server
            .clone()
            .serve(rmcp::transport::stdio())
            .await
            .context("the MCP handshake with the client failed")?;
        let connection = running.cancellation_token();
        let stopped = tokio::select! {
            quit = running.waiting() => {
                tracing::debug!("the MCP session ended: {quit:?}");
                None
            }
            stop = signals.next() => {
                crate::log::note(
                    crate::log::Level::Info,
                    &format!("rein mcp serve: {}, ending the session", stop.name()),
                );
                connection.cancel();
                Some(stop)
            }
        };
        let stopped_with = |code: ExitCode| stopped.map_or(code, |s| ExitCode::from(s.exit_code()));
        let Some(handle) = server.inner.run.lock().await.take() else {
            return Ok(stopped_with(ExitCode::SUCCESS));
        };
        let output = handle.finish(None).await?;
        session.engine.leave_shared_limits().await;
        crate::log::note(
            crate::log::Level::Info,
            &format!(
                "rein mcp serve: run {run_id} ended {}: {}",
                output.report.outcome, output.report.summary
            ),
        );
        Ok(stopped_with(
            if output.report.outcome == rein_core::Outcome::Succeeded {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            },
        ))
    });
    // A signal leaves the stdin reader blocked in a read that only the
    // client's closing ends; dropping the runtime would wait for it.
    runtime.shutdown_background();
    served
}

/// The MCP tools of `agent`: its registry tools, described as the model
/// sees them, annotated from rein's class.
fn mcp_tools(registry: &Registry, agent: &AgentBinding) -> Result<Vec<Tool>> {
    let mut tools = Vec::new();
    for name in agent.tools.keys() {
        let spec = registry.tool(name).with_context(|| {
            format!(
                "agent `{}` offers `{name}`, which the registry lacks",
                agent.name
            )
        })?;
        tools.push(mcp_tool(spec));
    }
    Ok(tools)
}

fn mcp_tool(spec: &ToolSpec) -> Tool {
    let schema = match &spec.schema {
        Value::Object(map) => map.clone(),
        _ => serde_json::Map::new(),
    };
    Tool::new(
        spec.name.clone(),
        spec.model_description(),
        Arc::new(schema),
    )
    .with_annotations(annotations(spec.class))
}

/// What an MCP client is told of a tool's nature: rein's class, which
/// decides retries and keys here too.
fn annotations(class: ToolClass) -> ToolAnnotations {
    let (read_only, idempotent, destructive) = match class {
        ToolClass::Read => (true, true, false),
        ToolClass::IdempotentWrite => (false, true, false),
        _ => (false, false, true),
    };
    ToolAnnotations::new()
        .read_only(read_only)
        .idempotent(idempotent)
        .destructive(destructive)
        .open_world(true)
}

/// The intent of a call: the client's name for it, or its tool and the
/// digest of its normalized arguments (see the module docs).
fn intent_of(
    request: &CallToolRequestParams,
    binding: Option<&rein_engine::run::ToolBinding>,
    args: &Value,
) -> String {
    let named = request
        .meta
        .as_ref()
        .and_then(|meta| meta.0.0.get(META_INTENT))
        .and_then(Value::as_str)
        .filter(|intent| !intent.trim().is_empty());
    if let Some(intent) = named {
        return intent.to_owned();
    }
    let canonical = match binding {
        Some(binding) => binding.normalizer.canonical_json(args),
        None => args.to_string().into_bytes(),
    };
    let digest = Sha256::digest(&canonical);
    let short: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("mcp:{}:{short}", request.name)
}

#[derive(Clone)]
struct McpServer {
    inner: Arc<Inner>,
}

struct Inner {
    binding: &'static AgentBinding,
    tools: Vec<Tool>,
    approve_via: ApproveVia,
    /// The session's run; taken when the client leaves.
    run: tokio::sync::Mutex<Option<RunHandle<'static>>>,
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("rein", env!("CARGO_PKG_VERSION")))
            .with_instructions(format!(
                "Tools of agent `{}`, each call guarded by rein: validated, keyed, recorded before it is sent, retried only when safe. A failed call says whether it may have taken effect; do not repeat one that may have.",
                self.inner.binding.name
            ))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.inner.tools.clone()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        if !self.inner.binding.tools.contains_key(&name) {
            return Err(ErrorData::invalid_params(
                format!("unknown tool `{name}`"),
                None,
            ));
        }
        let args = Value::Object(request.arguments.clone().unwrap_or_default());
        let intent = intent_of(&request, self.inner.binding.tools.get(&name), &args);
        let mut run = self.inner.run.lock().await;
        let Some(handle) = run.as_mut() else {
            return Err(ErrorData::internal_error(
                "the session's run has ended",
                None,
            ));
        };
        // Who is asked when the call needs approval (see `elicit`).
        let by = elicit::decider(context.client_info().as_ref());
        let asking = self.inner.approve_via == ApproveVia::Client
            && elicit::form_supported(context.client_capabilities().as_ref());
        let no_requests = context
            .protocol_version()
            .is_some_and(|v| v >= ProtocolVersion::V_2026_07_28);
        // A call sent again with the user's answer: the answer is the
        // decision, recorded before the call looks for one.
        let users_answer = request
            .input_responses
            .as_ref()
            .and_then(|responses| elicit::answered(responses, &by));
        if let Some(Some(decision)) = &users_answer
            && let Err(e) = handle.decide(&intent, decision.clone()).await
        {
            tracing::debug!("the client's answer was not recorded: {e}");
        }
        let mut input = None;
        let approver: Option<Arc<dyn Approver>> = match (asking, no_requests) {
            (false, _) => None,
            (true, false) => Some(Arc::new(ClientApprover::new(context.peer.clone(), by))),
            // Answered once: not asked again (a dismissed form waits for a
            // decision through rein).
            (true, true) if users_answer.is_some() => None,
            (true, true) => {
                let (signal, asked) = InputSignal::new();
                input = Some(asked);
                Some(Arc::new(signal))
            }
        };
        handle.ask_approvals_of(approver);
        let result = match input {
            None => handle.call(&name, args, &intent).await,
            Some(asked) => {
                tokio::select! {
                    result = handle.call(&name, args, &intent) => result,
                    // The approval is recorded and waits: asked of the
                    // user by answering `input_required`; the call is
                    // made when it comes again with the answer.
                    Ok(waiting) = asked => {
                        return elicit::input_required(&waiting)
                            .map(CallToolResponse::InputRequired)
                            .ok_or_else(|| ErrorData::internal_error("cannot build the approval form", None));
                    }
                }
            }
        };
        Ok(CallToolResponse::from(match result.outcome {
            Ok(value) => answer(value),
            Err(failure) => {
                let error = json!({"error": {
                    "category": failure.category(),
                    "effect": failure.effect(),
                    "retryable": failure.retryable(),
                    "message": failure.model_message(),
                    "maybe_applied": failure.effect() != Effect::NotApplied,
                }});
                let mut result = CallToolResult::error(vec![ContentBlock::text(
                    failure.model_message().to_owned(),
                )]);
                result.structured_content = Some(error);
                result
            }
        }))
    }
}

/// A successful call: the result as JSON text, and as structured content
/// when it is an object.
fn answer(value: Value) -> CallToolResult {
    let mut result = CallToolResult::success(vec![ContentBlock::text(value.to_string())]);
    if value.is_object() {
        result.structured_content = Some(value);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn annotations_follow_reins_class() {
        let read = annotations(ToolClass::Read);
        assert_eq!(read.read_only_hint, Some(true));
        let irreversible = annotations(ToolClass::Irreversible);
        assert_eq!(irreversible.destructive_hint, Some(true));
        assert_eq!(irreversible.idempotent_hint, Some(false));
    }

    #[test]
    fn the_same_call_is_the_same_intent_unless_the_client_names_another() {
        let args = json!({"order_id": "A-1", "to": "x"});
        let request = CallToolRequestParams::new("send_email")
            .with_arguments(args.as_object().cloned().unwrap_or_default());
        let first = intent_of(&request, None, &args);
        assert_eq!(first, intent_of(&request, None, &args));
        assert!(first.starts_with("mcp:send_email:"));
        let other = json!({"order_id": "A-2", "to": "x"});
        assert_ne!(first, intent_of(&request, None, &other));
    }
}
