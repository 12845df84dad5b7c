//! [`Rule::MissingUnit`]: durations, sizes and amounts of money whose
//! unit the model must guess (seed 002, "Missing units and formats":
//! "Encode the unit in the parameter name and the description. Both.").

use super::definition::ToolDefinition;
use super::finding::Finding;
use super::param::{Param, params};
use super::rule::{Rule, Severity};
use super::words::{name_words, text_words};

/// What a quantity measures, each with the words that name it and the
/// units that measure it.
#[derive(Debug, Clone, Copy)]
struct Quantity {
    what: &'static str,
    words: &'static [&'static str],
    units: &'static [&'static str],
    example: &'static str,
}

const DURATION: Quantity = Quantity {
    what: "a duration",
    words: &[
        "timeout",
        "delay",
        "interval",
        "duration",
        "ttl",
        "wait",
        "age",
        "expiry",
        "expiration",
        "retention",
        "backoff",
        "latency",
        "elapsed",
        "lifetime",
        "cooldown",
        "grace",
        "window",
        "sleep",
        "deadline",
    ],
    units: &[
        "ns",
        "nanos",
        "nanoseconds",
        "us",
        "micros",
        "microseconds",
        "ms",
        "millis",
        "msec",
        "milliseconds",
        "millisecond",
        "s",
        "sec",
        "secs",
        "second",
        "seconds",
        "min",
        "mins",
        "minute",
        "minutes",
        "h",
        "hr",
        "hrs",
        "hour",
        "hours",
        "day",
        "days",
        "week",
        "weeks",
        "month",
        "months",
        "year",
        "years",
    ],
    example: "timeout_seconds",
};

const SIZE: Quantity = Quantity {
    what: "a size",
    words: &["size", "memory", "disk", "storage", "bandwidth"],
    units: &[
        "bytes",
        "byte",
        "b",
        "kb",
        "kib",
        "mb",
        "mib",
        "gb",
        "gib",
        "tb",
        "tib",
        "kilobytes",
        "megabytes",
        "gigabytes",
        "bits",
        "kbps",
        "mbps",
        "gbps",
    ],
    example: "max_size_bytes",
};

const MONEY: Quantity = Quantity {
    what: "an amount of money",
    words: &[
        "amount", "price", "cost", "fee", "budget", "balance", "charge", "refund", "payment",
        "spend",
    ],
    units: &[
        "cents", "cent", "usd", "eur", "gbp", "jpy", "chf", "cad", "aud", "cny", "inr", "dollars",
        "dollar", "euros", "euro", "pounds", "yen", "currency", "minor", "micros",
    ],
    example: "amount_cents",
};

/// Size words that count things, not bytes: `page_size`, `batch_size`.
const COUNTED: &[&str] = &[
    "page", "batch", "pool", "sample", "group", "team", "step", "font", "chunk", "window",
];

/// Runs the rule on `tool`.
pub(super) fn check(tool: &ToolDefinition, out: &mut Vec<Finding>) {
    for param in params(&tool.schema) {
        if !(param.is("integer") || param.is("number")) {
            continue;
        }
        if let Some(quantity) = quantity(&param) {
            missing_unit(tool, &param, quantity, out);
        }
    }
}

fn quantity(param: &Param<'_>) -> Option<Quantity> {
    [DURATION, SIZE, MONEY]
        .into_iter()
        .find(|q| param.has_any(q.words) && !(q.what == SIZE.what && param.has_any(COUNTED)))
}

fn missing_unit(
    tool: &ToolDefinition,
    param: &Param<'_>,
    quantity: Quantity,
    out: &mut Vec<Finding>,
) {
    // A `currency` beside an amount is its unit, as a name's unit is.
    let currency_beside = quantity.what == MONEY.what
        && param
            .siblings
            .keys()
            .any(|name| name_words(name).iter().any(|w| w == "currency"));
    if param.has_any(quantity.units) || currency_beside {
        return;
    }
    let description = param.description();
    let words = text_words(description);
    let mut in_description = words.iter().any(|w| quantity.units.contains(&w.as_str()))
        || (quantity.what == SIZE.what && description.contains("KiB"));
    if quantity.what == MONEY.what {
        in_description |= ['$', '€', '£', '¥']
            .iter()
            .any(|c| description.contains(*c));
    }
    let finding = Finding::new(
        Rule::MissingUnit,
        &tool.name,
        &param.field,
        if in_description {
            format!(
                "`{}` is {} whose unit only its description gives",
                param.name, quantity.what
            )
        } else {
            format!(
                "`{}` is {} with no unit in its name or description: the model will guess one",
                param.name, quantity.what
            )
        },
    )
    .with_help(format!(
        "put the unit in the name and the description: {}, \"… in {}\"",
        quantity.example,
        quantity.example.rsplit('_').next().unwrap_or("units")
    ));
    out.push(if in_description {
        finding.with_severity(Severity::Note)
    } else {
        finding
    });
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn found(props: Value) -> Vec<(Rule, Severity)> {
        let tool = ToolDefinition::new(
            "query_database",
            "Run one query.",
            json!({"type": "object", "properties": props}),
        );
        let mut out = Vec::new();
        check(&tool, &mut out);
        out.into_iter().map(|f| (f.rule, f.severity)).collect()
    }

    #[test]
    fn a_unitless_timeout_fires() {
        let found =
            found(json!({"timeout": {"type": "integer", "description": "Request timeout"}}));
        assert_eq!(found, [(Rule::MissingUnit, Severity::Warning)]);
    }

    #[test]
    fn a_unit_in_the_name_passes_and_one_only_in_the_description_is_a_note() {
        assert!(found(json!({"timeout_seconds": {"type": "integer", "description": "Query timeout in seconds."}})).is_empty());
        assert!(
            found(json!({"timeoutMs": {"type": "integer", "description": "Timeout."}})).is_empty()
        );
        let described =
            found(json!({"timeout": {"type": "integer", "description": "Timeout in seconds."}}));
        assert_eq!(described, [(Rule::MissingUnit, Severity::Note)]);
    }

    #[test]
    fn money_needs_a_currency_which_a_sibling_may_give() {
        assert_eq!(
            found(json!({"amount": {"type": "number", "description": "How much to refund."}}))
                .len(),
            1
        );
        let sibling = found(json!({
            "amount": {"type": "integer", "description": "How much to charge."},
            "currency": {"type": "string", "enum": ["EUR"], "description": "ISO 4217 code."}
        }));
        assert!(sibling.is_empty(), "{sibling:?}");
    }

    #[test]
    fn a_page_size_is_a_count_not_bytes() {
        assert!(
            found(json!({"page_size": {"type": "integer", "description": "Rows per page."}}))
                .is_empty()
        );
        assert_eq!(
            found(
                json!({"max_size": {"type": "integer", "description": "Largest file accepted."}})
            )
            .len(),
            1
        );
    }

    #[test]
    fn strings_are_left_to_the_example_rule() {
        assert!(
            found(json!({"timeout": {"type": "string", "description": "e.g. 30s"}})).is_empty()
        );
    }
}
