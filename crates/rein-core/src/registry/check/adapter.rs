//! `[tools.NAME.adapter]`: how a tool is called, one kind at a time.

use std::path::{Path, PathBuf};

use super::{
    Checker, Merged, is_digest, is_env_name, is_header_name, is_reserved_header, resolve_relative,
};
use crate::config::Ratio;
use crate::deadline::{ChildCaps, Cost};
use crate::registry::adapter::{
    AdapterConfig, AdapterTable, AgentAdapterConfig, CommandAdapterConfig, HttpAdapterConfig,
    McpAdapterConfig,
};
use crate::registry::constants::DEFAULT_AGENT_BUDGET_RATIO;
use crate::registry::constants::{
    DEFAULT_MAX_OUTPUT_BYTES, DEFAULT_MAX_RESULT_BYTES, RESERVED_ENV_PREFIX,
};
use crate::registry::spec::{AdapterSpec, IdempotencySpec};
use crate::tool::ToolClass;

impl<'a> Checker<'a> {
    /// `[tools.NAME.adapter]`: what kept the table from being read (each
    /// problem at its own field), and its kind's own check of what was.
    pub(super) fn adapter(
        &mut self,
        merged: &Merged<'a>,
        file: &Path,
        p: &str,
        class: Option<ToolClass>,
        idempotency: Option<&IdempotencySpec>,
        table: &AdapterTable,
    ) -> Option<AdapterSpec> {
        let f = format!("{p}.adapter");
        for problem in &table.problems {
            let field = if problem.field.is_empty() {
                f.clone()
            } else {
                format!("{f}.{}", problem.field)
            };
            self.report(file, field, problem.message.clone());
        }
        // The fields that were read are checked too, so that one pass
        // reports everything; the adapter stands only when nothing failed.
        let config = table.config.as_ref()?;
        let spec = match config {
            AdapterConfig::Http(c) => self.http_adapter(file, &f, class, idempotency, c),
            AdapterConfig::Command(c) => self.command_adapter(file, &f, c),
            AdapterConfig::Agent(c) => self.agent_adapter(merged, file, &f, c),
            AdapterConfig::Mcp(c) => self.mcp_adapter(merged, file, p, &f, class, c),
        };
        spec.filter(|_| table.problems.is_empty())
    }

    /// A byte cap (`max_result_bytes`, `max_output_bytes`): `default` when
    /// unset; zero is reported, clearing `ok`.
    pub(super) fn byte_cap(
        &mut self,
        file: &Path,
        field: &str,
        value: Option<u64>,
        default: usize,
        ok: &mut bool,
    ) -> usize {
        match value {
            None => default,
            Some(0) => {
                self.report(file, field, "must be greater than zero");
                *ok = false;
                0
            }
            Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
        }
    }

    pub(super) fn http_adapter(
        &mut self,
        file: &Path,
        f: &str,
        class: Option<ToolClass>,
        idempotency: Option<&IdempotencySpec>,
        c: &HttpAdapterConfig,
    ) -> Option<AdapterSpec> {
        let mut ok = true;
        let url = match &c.url {
            None => {
                self.report(file, format!("{f}.url"), "is required");
                None
            }
            Some(url) => self.url(file, &format!("{f}.url"), url),
        };
        for (name, value) in &c.headers {
            let field = format!("{f}.headers.{name}");
            if !is_header_name(name) {
                self.report(file, field, "is not a valid HTTP header name");
                ok = false;
            } else if is_reserved_header(name)
                || idempotency.is_some_and(|i| i.header.eq_ignore_ascii_case(name))
            {
                self.report(
                    file,
                    field,
                    "is set by rein on every call and cannot be overridden",
                );
                ok = false;
            } else if value.contains(['\r', '\n']) {
                self.report(file, field, "must not contain line breaks");
                ok = false;
            }
        }
        let status_url = match &c.status_url {
            None => None,
            Some(_) if class == Some(ToolClass::Irreversible) => {
                self.report(
                    file,
                    format!("{f}.status_url"),
                    "is not allowed on an irreversible tool: it has no idempotency key to look a call up by",
                );
                ok = false;
                None
            }
            Some(url) => {
                let checked = self.url(file, &format!("{f}.status_url"), url);
                ok &= checked.is_some();
                checked
            }
        };
        let max_result_bytes = self.byte_cap(
            file,
            &format!("{f}.max_result_bytes"),
            c.max_result_bytes,
            DEFAULT_MAX_RESULT_BYTES,
            &mut ok,
        );
        let url = url?;
        ok.then(|| AdapterSpec::Http {
            url,
            method: c.method.unwrap_or_default(),
            headers: c.headers.clone(),
            status_url,
            max_result_bytes,
        })
    }

    pub(super) fn command_adapter(
        &mut self,
        file: &Path,
        f: &str,
        c: &CommandAdapterConfig,
    ) -> Option<AdapterSpec> {
        let mut ok = true;
        let program = match c.program.as_deref() {
            None => {
                self.report(
                    file,
                    format!("{f}.program"),
                    "is required for a command adapter: a program name or a path relative to this file",
                );
                None
            }
            Some(program) if program.trim().is_empty() => {
                self.report(file, format!("{f}.program"), "must not be empty");
                None
            }
            Some(program) if program.contains('\0') => {
                self.report(file, format!("{f}.program"), "must not contain a NUL byte");
                None
            }
            // A bare name is looked up on PATH when called; a path is the
            // config file's, wherever rein is started.
            Some(program) if program.contains('/') => {
                Some(resolve_relative(file, Path::new(program)))
            }
            Some(program) => Some(PathBuf::from(program)),
        };
        for (i, arg) in c.args.iter().enumerate() {
            if arg.contains('\0') {
                self.report(file, format!("{f}.args.{i}"), "must not contain a NUL byte");
                ok = false;
            }
        }
        let working_dir = match &c.working_dir {
            None => None,
            Some(dir) if dir.as_os_str().is_empty() => {
                self.report(
                    file,
                    format!("{f}.working_dir"),
                    "must not be empty; leave it out to keep rein's own",
                );
                ok = false;
                None
            }
            Some(dir) => Some(resolve_relative(file, dir)),
        };
        for (name, value) in &c.env {
            let field = format!("{f}.env.{name}");
            if !is_env_name(name) {
                self.report(
                    file,
                    field,
                    "must be the name of an environment variable (letters, digits, _)",
                );
                ok = false;
            } else if name.to_ascii_uppercase().starts_with(RESERVED_ENV_PREFIX) {
                self.report(
                    file,
                    field,
                    format!("is set by rein on every call ({RESERVED_ENV_PREFIX}*) and cannot be overridden"),
                );
                ok = false;
            } else if value.contains('\0') {
                self.report(file, field, "must not contain a NUL byte");
                ok = false;
            }
        }
        let max_output_bytes = self.byte_cap(
            file,
            &format!("{f}.max_output_bytes"),
            c.max_output_bytes,
            DEFAULT_MAX_OUTPUT_BYTES,
            &mut ok,
        );
        let program = program?;
        ok.then(|| AdapterSpec::Command {
            program,
            args: c.args.clone(),
            working_dir,
            env: c.env.clone(),
            max_output_bytes,
        })
    }

    /// `kind = "mcp"`: a tool of `[mcp_servers.NAME]`, called by its
    /// name there (`tool`, or the registry's name).
    pub(super) fn mcp_adapter(
        &mut self,
        merged: &Merged<'a>,
        file: &Path,
        p: &str,
        f: &str,
        _class: Option<ToolClass>,
        c: &McpAdapterConfig,
    ) -> Option<AdapterSpec> {
        let mut ok = true;
        let server = match c.server.as_deref() {
            None => {
                self.report(
                    file,
                    format!("{f}.server"),
                    "is required for an mcp adapter: the name of an [mcp_servers.NAME] table",
                );
                None
            }
            Some(name) => match merged.mcp_servers.get(name) {
                // A server with problems is reported by its own check.
                Some(entry) => {
                    crate::registry::mcp::check_mcp_server(entry.file, name, entry.config).ok()
                }
                None if merged
                    .broken
                    .contains(format!("mcp_servers.{name}").as_str()) =>
                {
                    None
                }
                None => {
                    self.report(
                        file,
                        format!("{f}.server"),
                        format!("names `{name}`, which is not an MCP server; define [mcp_servers.{name}]"),
                    );
                    None
                }
            },
        };
        let tool = match c.tool.as_deref() {
            Some(tool) if tool.trim().is_empty() => {
                self.report(
                    file,
                    format!("{f}.tool"),
                    "must not be empty; leave it out to call the tool by its registry name",
                );
                ok = false;
                String::new()
            }
            Some(tool) => tool.to_owned(),
            None => p.strip_prefix("tools.").unwrap_or(p).to_owned(),
        };
        let max_result_bytes = self.byte_cap(
            file,
            &format!("{f}.max_result_bytes"),
            c.max_result_bytes,
            DEFAULT_MAX_RESULT_BYTES,
            &mut ok,
        );
        let pin = match c.pin.as_deref() {
            None => None,
            Some(pin) if is_digest(pin) => Some(pin.to_owned()),
            Some(pin) => {
                self.report(
                    file,
                    format!("{f}.pin"),
                    format!("must be `sha256:` and 64 hex digits, as `rein mcp import` writes it, but it is `{pin}`"),
                );
                ok = false;
                None
            }
        };
        let server = server?;
        ok.then_some(AdapterSpec::Mcp {
            server,
            tool,
            max_result_bytes,
            pin,
        })
    }

    pub(super) fn agent_adapter(
        &mut self,
        merged: &Merged<'a>,
        file: &Path,
        f: &str,
        c: &AgentAdapterConfig,
    ) -> Option<AdapterSpec> {
        let mut ok = true;
        // An agent tool may name the agent that offers it: the depth and
        // size of the tree are bounded at run time (`server.agent_graph`).
        let agent = match c.agent.as_deref() {
            None => {
                self.report(
                    file,
                    format!("{f}.agent"),
                    "is required for an agent adapter: the name of an agent in the config",
                );
                None
            }
            Some(agent) if !merged.has("agents", agent) => {
                self.report(
                    file,
                    format!("{f}.agent"),
                    format!("names `{agent}`, which is not an agent; define [agents.{agent}]"),
                );
                None
            }
            Some(agent) => Some(agent.to_owned()),
        };
        let ratio = c.budget_ratio.unwrap_or(DEFAULT_AGENT_BUDGET_RATIO);
        let budget_ratio = Ratio::new_positive("budget_ratio", ratio).ok();
        if budget_ratio.is_none() {
            self.report(
                file,
                format!("{f}.budget_ratio"),
                format!(
                    "must be a number in (0, 1]: the share of the caller's remaining budget, but it is {ratio}"
                ),
            );
        }
        let zero = "must be greater than zero; leave it out for no cap beyond the budget_ratio";
        let mut positive = |set: bool, is_zero: bool, field: &str| {
            if set && is_zero {
                self.report(file, format!("{f}.{field}"), zero);
                false
            } else {
                true
            }
        };
        ok &= positive(
            c.max_tokens.is_some(),
            c.max_tokens == Some(0),
            "max_tokens",
        );
        ok &= positive(c.max_steps.is_some(), c.max_steps == Some(0), "max_steps");
        ok &= positive(
            c.wall_clock.is_some(),
            c.wall_clock.is_some_and(|d| d.is_zero()),
            "wall_clock",
        );
        let cost = match c
            .max_cost_usd
            .map(|usd| Cost::from_usd("max_cost_usd", usd))
        {
            None => None,
            Some(Ok(cost)) => {
                ok &= positive(true, cost == Cost::ZERO, "max_cost_usd");
                Some(cost)
            }
            Some(Err(err)) => {
                self.config_error(file, f, &err);
                ok = false;
                None
            }
        };
        let caps = ChildCaps {
            wall_clock: c.wall_clock,
            steps: c.max_steps,
            tokens: c.max_tokens,
            cost,
        };
        let (agent, budget_ratio) = (agent?, budget_ratio?);
        ok.then_some(AdapterSpec::Agent {
            agent,
            budget_ratio,
            caps,
        })
    }
}
