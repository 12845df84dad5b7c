//! `[tools.NAME]`: what the model sees (name, description, schema), the
//! class and its key recipe, the latency profile and compensation.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde_json::{Map, Value};

use super::{
    Checker, Merged, default_agent_latency, is_header_name, is_reserved_header, is_tool_name,
    properties, required,
};
use crate::idempotency::NormalizerConfig;
use crate::latency::{AllowanceFactor, LatencyScale, MAX_ALLOWANCE_FACTOR, MIN_ALLOWANCE_FACTOR};
use crate::registry::adapter::AdapterConfig;
use crate::registry::compensation::{ArgSource, CompensationGrade, CompensationSpec};
use crate::registry::config::{
    CompensationConfig, IdempotencyConfig, LatencyConfig, LatencyMode, ToolConfig,
};
use crate::registry::constants::{DEFAULT_IDEMPOTENCY_HEADER, DEFAULT_OBSERVE_MIN_SAMPLES};
use crate::registry::constants::{DEFAULT_TOOL_FALLBACK_P99, DEFAULT_TOOL_OWNER};
use crate::registry::spec::{IdempotencySpec, LatencySpec, ToolSpec};
use crate::tool::{LatencyProfile, ToolClass};

impl<'a> Checker<'a> {
    pub(super) fn tools(&mut self, merged: &Merged<'a>) -> BTreeMap<String, ToolSpec> {
        let mut out = BTreeMap::new();
        for (name, entry) in &merged.tools {
            if let Some(spec) = self.tool(merged, entry.file, name, entry.config) {
                out.insert((*name).to_owned(), spec);
            }
        }
        out
    }

    pub(super) fn tool(
        &mut self,
        merged: &Merged<'a>,
        file: &Path,
        name: &str,
        c: &ToolConfig,
    ) -> Option<ToolSpec> {
        let p = format!("tools.{name}");
        if !is_tool_name(name) {
            self.report(
                file,
                p.clone(),
                "tool names must be 1 to 64 ASCII letters, digits, `_` or `-`, as model APIs require",
            );
        }
        let description = self.required_text(file, &p, "description", c.description.as_deref());
        let class = c.class;
        if class.is_none() {
            self.report(
                file,
                format!("{p}.class"),
                "is required: read, idempotent_write or irreversible",
            );
        }
        let schema = match &c.schema {
            None => {
                self.report(
                    file,
                    format!("{p}.schema"),
                    "is required: a JSON Schema of type object describing every argument",
                );
                None
            }
            Some(schema) => self.schema(file, &p, schema).then(|| schema.clone()),
        };
        // What a minimal tool leaves out, rein decides, and names
        // (`defaulted`) so that `rein check --explain` shows it.
        let mut defaulted = Vec::new();
        let resource_group = match c.resource_group.as_deref() {
            // Its own group: ungoverned unless [resource_groups.<name>]
            // says otherwise.
            None => {
                defaulted.push("resource_group");
                Some(name.to_owned())
            }
            Some(group) if !merged.has("resource_groups", group) => {
                self.report(
                    file,
                    format!("{p}.resource_group"),
                    format!("names `{group}`, which is not a resource group; define [resource_groups.{group}]"),
                );
                None
            }
            Some(group) => Some(group.to_owned()),
        };
        let side_effect_tier = match (c.side_effect_tier, class) {
            (Some(tier), _) => Some(tier),
            (None, Some(class)) => {
                defaulted.push("side_effect_tier");
                Some(crate::registry::spec::SideEffectTier::implied_by(class))
            }
            // The missing class is reported already.
            (None, None) => None,
        };
        let owner = match c.owner.as_deref() {
            None => {
                defaulted.push("owner");
                Some(DEFAULT_TOOL_OWNER.to_owned())
            }
            Some(owner) => self.required_text(file, &p, "owner", Some(owner)),
        };
        let agent_adapter = match c.adapter.as_ref().and_then(|table| table.config.as_ref()) {
            Some(AdapterConfig::Agent(agent)) => Some(agent),
            _ => None,
        };
        let latency = match (&c.latency, agent_adapter) {
            (None, Some(adapter)) => Some(default_agent_latency(adapter.wall_clock)),
            // Observed, planned for a slow p99 until measured.
            (None, None) => {
                defaulted.push("latency");
                LatencyProfile::new(
                    DEFAULT_TOOL_FALLBACK_P99,
                    DEFAULT_TOOL_FALLBACK_P99,
                    DEFAULT_TOOL_FALLBACK_P99,
                    0,
                )
                .ok()
                .map(|fallback| LatencySpec::Observe {
                    fallback,
                    min_samples: DEFAULT_OBSERVE_MIN_SAMPLES,
                })
            }
            (Some(latency), _) => self.latency(file, &p, latency),
        };
        let allowance_factor = self.allowance_factor(file, &p, c.latency.as_ref());
        let latency_scale = self.latency_scale(file, &p, c);
        let idempotency = self.idempotency(file, &p, &c.idempotency);
        let adapter = match &c.adapter {
            None => {
                self.report(
                    file,
                    format!("{p}.adapter"),
                    "is required: { kind = \"http\", url = \"…\" }, { kind = \"command\", program = \"…\" }, { kind = \"agent\", agent = \"…\" } or { kind = \"mcp\", server = \"…\" }",
                );
                None
            }
            Some(adapter) => self.adapter(merged, file, &p, class, idempotency.as_ref(), adapter),
        };
        let compensation = self.compensation(merged, file, name, c);
        let resource_key = match c.resource_key.as_deref() {
            None => Some(None),
            Some(text) => {
                let props = c.schema.as_ref().and_then(properties);
                match crate::registry::fan_out::check_resource_key(text, class, props) {
                    Ok(key) => Some(Some(key)),
                    Err((field, message)) => {
                        self.report(file, format!("{p}.{field}"), message);
                        None
                    }
                }
            }
        };
        let approval = {
            let props = c.schema.as_ref().and_then(properties);
            match crate::registry::approval::check_tool_approval(&c.approval, props) {
                Ok(approval) => Some(approval),
                Err((field, message)) => {
                    self.report(file, format!("{p}.{field}"), message);
                    None
                }
            }
        };
        let lint_allow = match crate::registry::lint_allow::check_lint(&c.lint) {
            Ok(allowed) => Some(allowed),
            Err(problems) => {
                for (field, message) in problems {
                    self.report(file, format!("{p}.{field}"), message);
                }
                None
            }
        };
        Some(ToolSpec {
            name: name.to_owned(),
            description: description?,
            schema: schema?,
            class: class?,
            idempotency: idempotency?,
            compensation: compensation?,
            latency: latency?,
            allowance_factor: allowance_factor?,
            latency_scale: latency_scale?,
            resource_group: resource_group?,
            side_effect_tier: side_effect_tier?,
            owner: owner?,
            defaulted,
            avoid_at_plan_time: c.avoid_at_plan_time,
            self_heal_allowance: c.self_heal_allowance,
            adapter: adapter?,
            resource_key: resource_key?,
            approval: approval?,
            lint_allow: lint_allow?,
            source: file.to_path_buf(),
        })
    }

    /// Structural rules for a tool schema, then the injected compiler.
    /// Returns whether the schema is acceptable.
    pub(super) fn schema(&mut self, file: &Path, p: &str, schema: &Value) -> bool {
        let f = format!("{p}.schema");
        let Value::Object(map) = schema else {
            self.report(file, f, "must be a JSON Schema table");
            return false;
        };
        let before = self.problems.len();
        match map.get("type") {
            Some(Value::String(t)) if t == "object" => {}
            Some(other) => self.report(
                file,
                format!("{f}.type"),
                format!(
                    "must be \"object\": model APIs pass arguments as one object, but it is {other}"
                ),
            ),
            None => self.report(
                file,
                format!("{f}.type"),
                "is required and must be \"object\"",
            ),
        }
        let empty = Map::new();
        let properties = match map.get("properties") {
            None => &empty,
            Some(Value::Object(props)) => props,
            Some(_) => {
                self.report(
                    file,
                    format!("{f}.properties"),
                    "must be a table of argument schemas",
                );
                &empty
            }
        };
        for (arg, arg_schema) in properties {
            let described = arg_schema
                .get("description")
                .and_then(Value::as_str)
                .is_some_and(|d| !d.trim().is_empty());
            if !described {
                self.report(
                    file,
                    format!("{f}.properties.{arg}.description"),
                    "is required: the model fills each argument from its description",
                );
            }
        }
        match map.get("required") {
            None => {}
            Some(Value::Array(items)) => {
                for item in items {
                    match item.as_str() {
                        Some(req) if properties.contains_key(req) => {}
                        Some(req) => self.report(
                            file,
                            format!("{f}.required"),
                            format!("names `{req}`, which is not in properties"),
                        ),
                        None => self.report(
                            file,
                            format!("{f}.required"),
                            format!("must list property names, but holds {item}"),
                        ),
                    }
                }
            }
            Some(_) => self.report(
                file,
                format!("{f}.required"),
                "must be a list of property names",
            ),
        }
        if self.problems.len() > before {
            return false;
        }
        let issues = (self.schema_check)(schema);
        let ok = issues.is_empty();
        for issue in issues {
            let field = if issue.path.is_empty() {
                f.clone()
            } else {
                format!("{f}.{}", issue.path)
            };
            self.report(file, field, issue.message);
        }
        ok
    }

    /// `latency.allowance_factor`, in [1, 10] (default 2).
    pub(super) fn allowance_factor(
        &mut self,
        file: &Path,
        p: &str,
        c: Option<&LatencyConfig>,
    ) -> Option<AllowanceFactor> {
        let Some(factor) = c.and_then(|c| c.allowance_factor) else {
            return Some(AllowanceFactor::default());
        };
        match AllowanceFactor::new(factor) {
            Ok(factor) => Some(factor),
            Err(_) => {
                self.report(
                    file,
                    format!("{p}.latency.allowance_factor"),
                    format!(
                        "must be a number in [{MIN_ALLOWANCE_FACTOR}, {MAX_ALLOWANCE_FACTOR}] (one attempt's allowance is p99 × it), but it is {factor}"
                    ),
                );
                None
            }
        }
    }

    /// `latency.scale`: observe mode only (a declared profile is one
    /// profile whatever the size, so buckets would change nothing), its
    /// `arg` a path to an argument of the schema, its `buckets` ascending.
    /// `Some(None)` when there is none.
    pub(super) fn latency_scale(
        &mut self,
        file: &Path,
        p: &str,
        c: &ToolConfig,
    ) -> Option<Option<LatencyScale>> {
        let Some(latency) = &c.latency else {
            return Some(None);
        };
        let Some(scale) = &latency.scale else {
            return Some(None);
        };
        let f = format!("{p}.latency.scale");
        if latency.mode != LatencyMode::Observe {
            self.report(
                file,
                f,
                "is only for mode = \"observe\": a declared profile is one profile for every call, so buckets would change nothing",
            );
            return None;
        }
        let (Some(arg), Some(buckets)) = (&scale.arg, &scale.buckets) else {
            for (missing, field, what) in [
                (
                    scale.arg.is_none(),
                    "arg",
                    "the argument whose size picks a call's bucket, e.g. \"args.limit\"",
                ),
                (
                    scale.buckets.is_none(),
                    "buckets",
                    "ascending upper bounds, e.g. [100, 1000, 10000]",
                ),
            ] {
                if missing {
                    self.report(file, format!("{f}.{field}"), format!("is required: {what}"));
                }
            }
            return None;
        };
        let scale = match LatencyScale::new(arg, buckets.clone()) {
            Ok(scale) => scale,
            Err(e) => {
                self.report(file, format!("{f}.{}", e.field), e.reason);
                return None;
            }
        };
        if let Some(props) = c.schema.as_ref().and_then(properties)
            && !props.contains_key(scale.argument())
        {
            self.report(
                file,
                format!("{f}.arg"),
                format!(
                    "reads `{}`, but the tool's schema has no argument `{}`",
                    scale.arg(),
                    scale.argument()
                ),
            );
            return None;
        }
        Some(Some(scale))
    }

    pub(super) fn latency(
        &mut self,
        file: &Path,
        p: &str,
        c: &LatencyConfig,
    ) -> Option<LatencySpec> {
        let f = format!("{p}.latency");
        match c.mode {
            LatencyMode::Declared => {
                for (present, field) in [
                    (c.fallback_p99.is_some(), "fallback_p99"),
                    (c.min_samples.is_some(), "min_samples"),
                ] {
                    if present {
                        self.report(
                            file,
                            format!("{f}.{field}"),
                            "is only for mode = \"observe\"",
                        );
                    }
                }
                let mut quantile = |q: Option<Duration>, field: &str| {
                    if q.is_none() {
                        self.report(
                            file,
                            format!("{f}.{field}"),
                            "is required for a declared profile (or set mode = \"observe\")",
                        );
                    }
                    q
                };
                let (p50, p95, p99) = (
                    quantile(c.p50, "p50"),
                    quantile(c.p95, "p95"),
                    quantile(c.p99, "p99"),
                );
                match LatencyProfile::new(p50?, p95?, p99?, c.samples.unwrap_or(0)) {
                    Ok(profile) => Some(LatencySpec::Declared(profile)),
                    Err(err) => {
                        self.config_error(file, p, &err);
                        None
                    }
                }
            }
            LatencyMode::Observe => {
                for (present, field) in [
                    (c.p50.is_some(), "p50"),
                    (c.p95.is_some(), "p95"),
                    (c.p99.is_some(), "p99"),
                    (c.samples.is_some(), "samples"),
                ] {
                    if present {
                        self.report(
                            file,
                            format!("{f}.{field}"),
                            "is only for a declared profile; observe mode measures it",
                        );
                    }
                }
                let min_samples = c.min_samples.unwrap_or(DEFAULT_OBSERVE_MIN_SAMPLES);
                if min_samples == 0 {
                    self.report(
                        file,
                        format!("{f}.min_samples"),
                        "must be greater than zero",
                    );
                }
                let Some(fallback) = c.fallback_p99 else {
                    self.report(
                        file,
                        format!("{f}.fallback_p99"),
                        "is required in observe mode: the p99 assumed until enough samples exist",
                    );
                    return None;
                };
                // Every quantile is the fallback p99: until measured, plan for
                // the slow case.
                match LatencyProfile::new(fallback, fallback, fallback, 0) {
                    Ok(fallback) if min_samples > 0 => Some(LatencySpec::Observe {
                        fallback,
                        min_samples,
                    }),
                    Ok(_) => None,
                    Err(_) => {
                        self.report(
                            file,
                            format!("{f}.fallback_p99"),
                            "must be greater than zero",
                        );
                        None
                    }
                }
            }
        }
    }

    pub(super) fn idempotency(
        &mut self,
        file: &Path,
        p: &str,
        c: &IdempotencyConfig,
    ) -> Option<IdempotencySpec> {
        let header = c
            .header
            .clone()
            .unwrap_or_else(|| DEFAULT_IDEMPOTENCY_HEADER.to_owned());
        let field = format!("{p}.idempotency.header");
        if !is_header_name(&header) {
            self.report(
                file,
                field,
                format!("must be a valid HTTP header name, but it is `{header}`"),
            );
            return None;
        }
        if is_reserved_header(&header) {
            self.report(
                file,
                field,
                format!("`{header}` is set by rein itself; choose another header"),
            );
            return None;
        }
        let mut normalizer = NormalizerConfig::default();
        if let Some(volatile) = &c.volatile_fields {
            normalizer.volatile_fields = volatile.clone();
        }
        if let Some(folded) = &c.case_insensitive_fields {
            normalizer.case_insensitive_fields = folded.clone();
        }
        Some(IdempotencySpec { normalizer, header })
    }

    /// The compensation rules; `Some(None)` is "no compensation, and that is
    /// fine", `None` a reported problem.
    pub(super) fn compensation(
        &mut self,
        merged: &Merged<'a>,
        file: &Path,
        name: &str,
        c: &ToolConfig,
    ) -> Option<Option<CompensationSpec>> {
        let p = format!("tools.{name}");
        let f = format!("{p}.compensation");
        let irreversible_unguarded =
            c.class == Some(ToolClass::Irreversible) && !c.avoid_at_plan_time;
        let needs_comp = "is required for an irreversible tool unless avoid_at_plan_time = true: \
                          name a compensation, or declare grade = \"none\" and set avoid_at_plan_time";
        let Some(comp) = &c.compensation else {
            if irreversible_unguarded {
                self.report(file, f, needs_comp);
                return None;
            }
            return Some(None);
        };
        if c.class == Some(ToolClass::Read) {
            self.report(
                file,
                f,
                "is not allowed on a read tool: a read has no effect to undo",
            );
            return None;
        }
        let Some(grade) = comp.grade else {
            self.report(
                file,
                format!("{f}.grade"),
                "is required: strong, weak or none",
            );
            return None;
        };
        if grade == CompensationGrade::None {
            return self.no_compensation(file, &f, comp, irreversible_unguarded);
        }
        let mut ok = true;
        let target = match comp.tool.as_deref() {
            None => {
                self.report(
                    file,
                    format!("{f}.tool"),
                    format!("is required when grade is {grade}"),
                );
                return None;
            }
            Some(target) if target == name => {
                self.report(
                    file,
                    format!("{f}.tool"),
                    "must name another tool: a tool cannot undo itself",
                );
                return None;
            }
            Some(target) => target,
        };
        let target_config = merged.tools.get(target).map(|e| e.config);
        if target_config.is_none() && !merged.has("tools", target) {
            self.report(
                file,
                format!("{f}.tool"),
                format!("names `{target}`, which is not a tool; define [tools.{target}]"),
            );
            ok = false;
        }
        match (target_config.and_then(|t| t.class), grade) {
            (Some(ToolClass::Read), _) => {
                self.report(
                    file,
                    format!("{f}.tool"),
                    format!("names `{target}`, a read tool: a read changes nothing, so it cannot compensate"),
                );
                ok = false;
            }
            (Some(ToolClass::Irreversible), CompensationGrade::Strong) => {
                self.report(
                    file,
                    format!("{f}.tool"),
                    format!(
                        "names `{target}`, an irreversible tool, but a strong compensation must be \
                         safe to repeat (idempotent_write); use grade = \"weak\" or an idempotent tool"
                    ),
                );
                ok = false;
            }
            _ => {}
        }
        if comp.window.is_some_and(|w| w.is_zero()) {
            self.report(file, format!("{f}.window"), "must be greater than zero");
            ok = false;
        }
        let forward_props = c.schema.as_ref().and_then(properties);
        let target_schema = target_config.and_then(|t| t.schema.as_ref());
        let target_props = target_schema.and_then(properties);
        let mut args = BTreeMap::new();
        for (arg, text) in &comp.args {
            let field = format!("{f}.args.{arg}");
            let source = match text.parse::<ArgSource>() {
                Ok(source) => source,
                Err(err) => {
                    self.report(file, field, err.to_string());
                    ok = false;
                    continue;
                }
            };
            let missing_arg = match (&source, forward_props) {
                (ArgSource::Args(path), Some(props)) => path
                    .first()
                    .filter(|first| !props.contains_key(first.as_str())),
                _ => None,
            };
            if let Some(first) = missing_arg {
                self.report(
                    file,
                    field.clone(),
                    format!(
                        "reads `{source}`, but the schema of `{name}` has no argument `{first}`"
                    ),
                );
                ok = false;
            }
            if target_props.is_some_and(|props| !props.contains_key(arg)) {
                self.report(file, field, format!("is not an argument of `{target}`"));
                ok = false;
            }
            args.insert(arg.clone(), source);
        }
        for req in target_schema.map(required).unwrap_or_default() {
            if !comp.args.contains_key(req) {
                self.report(
                    file,
                    format!("{f}.args"),
                    format!("does not fill `{req}`, which `{target}` requires"),
                );
                ok = false;
            }
        }
        ok.then(|| {
            Some(CompensationSpec {
                tool: target.to_owned(),
                grade,
                window: comp.window,
                args,
            })
        })
    }

    /// `grade = "none"`: nothing else may be set, and an irreversible tool
    /// must then be avoided at plan time.
    pub(super) fn no_compensation(
        &mut self,
        file: &Path,
        f: &str,
        comp: &CompensationConfig,
        irreversible_unguarded: bool,
    ) -> Option<Option<CompensationSpec>> {
        let mut ok = true;
        for (present, field) in [
            (comp.tool.is_some(), "tool"),
            (comp.window.is_some(), "window"),
            (!comp.args.is_empty(), "args"),
        ] {
            if present {
                self.report(
                    file,
                    format!("{f}.{field}"),
                    "must not be set when grade is none",
                );
                ok = false;
            }
        }
        if irreversible_unguarded {
            self.report(
                file,
                format!("{f}.grade"),
                "is none on an irreversible tool, which then needs avoid_at_plan_time = true",
            );
            ok = false;
        }
        ok.then_some(None)
    }
}
