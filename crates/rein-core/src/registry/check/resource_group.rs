//! `[resource_groups.NAME]`: rate limits and concurrency a group of tools shares.

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::path::Path;

use super::{Checker, Merged};
use crate::registry::config::ResourceGroupConfig;
use crate::registry::spec::{RateLimit, ResourceGroupSpec};

impl<'a> Checker<'a> {
    pub(super) fn resource_groups(
        &mut self,
        merged: &Merged<'a>,
    ) -> BTreeMap<String, ResourceGroupSpec> {
        let mut out = BTreeMap::new();
        for (name, entry) in &merged.resource_groups {
            if let Some(spec) = self.resource_group(entry.file, name, entry.config) {
                out.insert((*name).to_owned(), spec);
            }
        }
        out
    }

    pub(super) fn resource_group(
        &mut self,
        file: &Path,
        name: &str,
        c: &ResourceGroupConfig,
    ) -> Option<ResourceGroupSpec> {
        let p = format!("resource_groups.{name}");
        self.name(file, &p, name);
        let mut ok = true;
        let rate = match c.rate_per_sec {
            None => {
                if c.burst.is_some() {
                    self.report(
                        file,
                        format!("{p}.burst"),
                        "needs rate_per_sec: a bucket that never refills limits nothing useful",
                    );
                    ok = false;
                }
                None
            }
            Some(per_sec) if !(per_sec.is_finite() && per_sec > 0.0) => {
                self.report(
                    file,
                    format!("{p}.rate_per_sec"),
                    format!("must be a finite number greater than zero, but it is {per_sec}"),
                );
                ok = false;
                None
            }
            Some(per_sec) => {
                // The default bucket holds one second's worth of calls.
                let default_burst = per_sec.ceil().clamp(1.0, f64::from(u32::MAX)) as u32;
                match c.burst {
                    Some(0) => {
                        self.report(file, format!("{p}.burst"), "must be greater than zero");
                        ok = false;
                        None
                    }
                    burst => Some(RateLimit {
                        per_sec,
                        burst: burst.unwrap_or(default_burst),
                    }),
                }
            }
        };
        let max_concurrency = match c.max_concurrency {
            None => None,
            Some(n) => {
                let limit = NonZeroU32::new(n);
                if limit.is_none() {
                    self.report(
                        file,
                        format!("{p}.max_concurrency"),
                        "must be greater than zero; leave it out for no limit",
                    );
                    ok = false;
                }
                limit
            }
        };
        // What the engine's governor of this group would refuse (a rate
        // beyond its range, a ceiling above its maximum) is refused here,
        // so a group rein check accepts is governed as written.
        if ok {
            let config = crate::governor::GovernorConfig::tool_group(rate, max_concurrency);
            if let Err(e) = crate::governor::Governor::new(config) {
                let field = match e.field() {
                    f if f.contains("burst") => "burst",
                    f if f.contains("rate_per_sec") => "rate_per_sec",
                    _ => "max_concurrency",
                };
                self.report(file, format!("{p}.{field}"), e.to_string());
                ok = false;
            }
        }
        ok.then(|| ResourceGroupSpec {
            name: name.to_owned(),
            rate,
            max_concurrency,
            source: file.to_path_buf(),
        })
    }
}
