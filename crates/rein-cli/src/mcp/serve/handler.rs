//! The MCP server rein is to a client: its tools, each `tools/call` the
//! guarded call of the run of the caller's tenant, and what a client is
//! told of a tool's nature and of a failure.
//!
//! # Why a call's intent is its tool and arguments
//!
//! MCP clients retry a call by sending it again as a new request; rein
//! must see the repeat as the same action, or a retried email goes out
//! twice. The intent of a call is the client's `_meta["rein/intent"]`
//! when it names one, else the tool and the digest of its normalized
//! arguments: within a run the same call is the same action, answered
//! from the ledger, not sent again. A client that means to do the same
//! thing twice names two intents.
//!
//! The annotations the client sees are derived from rein's class (a read
//! is `readOnlyHint`, an idempotent write `idempotentHint`, an
//! irreversible one `destructiveHint`), never copied from anywhere else.

use std::sync::Arc;

use anyhow::{Context, Result};
use rein_core::registry::{Registry, ToolSpec};
use rein_core::{Effect, TenantId, ToolClass};
use rein_engine::run::{AgentBinding, Approver};
use rmcp::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData,
    Implementation, ListToolsResult, PaginatedRequestParams, ProtocolVersion, RequestMetaObject,
    ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

use super::ApproveVia;
use super::runs::Runs;
use crate::mcp::elicit::{self, ClientApprover, InputSignal};

/// The `_meta` key a client may name a call's intent with.
pub const META_INTENT: &str = "rein/intent";

/// The MCP tools of `agent`: its registry tools, described as the model
/// sees them, annotated from rein's class.
pub fn mcp_tools(registry: &Registry, agent: &AgentBinding) -> Result<Vec<Tool>> {
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
    meta: &RequestMetaObject,
    binding: Option<&rein_engine::run::ToolBinding>,
    args: &Value,
) -> String {
    // The SDK moves a request's `_meta` into its context; a request built
    // in process may still carry it.
    let named = [Some(meta), request.meta.as_ref()]
        .into_iter()
        .flatten()
        .find_map(|meta| meta.0.0.get(META_INTENT))
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

/// The server a client talks to; clones share everything (the HTTP
/// transport makes one per session).
#[derive(Clone)]
pub struct McpServer {
    inner: Arc<Inner>,
}

struct Inner {
    binding: &'static AgentBinding,
    tools: Vec<Tool>,
    approve_via: ApproveVia,
    runs: Arc<Runs>,
}

impl McpServer {
    /// Serves `tools` of `binding` through `runs`.
    pub fn new(
        binding: &'static AgentBinding,
        tools: Vec<Tool>,
        approve_via: ApproveVia,
        runs: Arc<Runs>,
    ) -> McpServer {
        McpServer {
            inner: Arc::new(Inner {
                binding,
                tools,
                approve_via,
                runs,
            }),
        }
    }
}

/// The tenant a request acts for: the one its HTTP request was
/// authenticated as, else the server's own.
fn tenant_of(context: &RequestContext<RoleServer>, runs: &Runs) -> TenantId {
    context
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<super::http::Caller>())
        .map_or_else(|| runs.default_tenant().clone(), |caller| caller.0.clone())
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
        let intent = intent_of(
            &request,
            &context.meta,
            self.inner.binding.tools.get(&name),
            &args,
        );
        let tenant = tenant_of(&context, &self.inner.runs);
        let slot = self.inner.runs.slot(&tenant);
        let mut run = slot.lock().await;
        let handle = match self.inner.runs.open(&mut run, &tenant).await {
            Ok(handle) => handle,
            Err(why) => return Err(ErrorData::internal_error(why, None)),
        };
        // Who is asked when the call needs approval (see `elicit`).
        let by = elicit::decider(context.client_info().as_ref());
        let asking = self.inner.approve_via == ApproveVia::Client
            && elicit::form_supported(context.client_capabilities().as_ref());
        let no_requests = context
            .protocol_version()
            .is_some_and(|v| v >= ProtocolVersion::V_2026_07_28);
        // A call sent again with the answer to the form rein asked for
        // this very call (its intent is the form's state): the answer is
        // the decision, recorded before the call looks for one. Read only
        // from a client rein would ask: `--approve-via api` keeps every
        // decision with humans through rein.
        let users_answer = if asking && no_requests {
            request
                .input_responses
                .as_ref()
                .filter(|_| request.request_state.as_deref() == Some(intent.as_str()))
                .and_then(|responses| elicit::answered(responses, &by))
        } else {
            None
        };
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
        // A wait for an approval ends when the client goes away or the
        // server stops: it holds the tenant's run.
        let waits = self.inner.runs.closing().child_token();
        let client_gone = {
            let (gone, waits) = (context.ct.clone(), waits.clone());
            tokio::spawn(async move {
                gone.cancelled().await;
                waits.cancel();
            })
        };
        handle.end_waits_with(Some(waits));
        let result = match input {
            None => handle.call(&name, args, &intent).await,
            Some(asked) => {
                tokio::select! {
                    biased;
                    result = handle.call(&name, args, &intent) => result,
                    // The approval is recorded and waits undecided: asked
                    // of the user by answering `input_required`; the call
                    // is made when it comes again with the answer.
                    Ok(waiting) = asked => {
                        client_gone.abort();
                        return elicit::input_required(&waiting)
                            .map(CallToolResponse::InputRequired)
                            .ok_or_else(|| ErrorData::internal_error("cannot build the approval form", None));
                    }
                }
            }
        };
        client_gone.abort();
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
        let none = RequestMetaObject::default();
        let first = intent_of(&request, &none, None, &args);
        assert_eq!(first, intent_of(&request, &none, None, &args));
        assert!(first.starts_with("mcp:send_email:"));
        let other = json!({"order_id": "A-2", "to": "x"});
        assert_ne!(first, intent_of(&request, &none, None, &other));
        let mut named = RequestMetaObject::default();
        named.0.0.insert(META_INTENT.into(), json!("tell-buyer"));
        assert_eq!(intent_of(&request, &named, None, &args), "tell-buyer");
    }
}
