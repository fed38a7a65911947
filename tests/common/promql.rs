//! PromQL as the tests read it: the metric names an expression reads, and
//! the expressions of the Grafana dashboard.

use std::collections::BTreeSet;

use serde_json::Value;

/// PromQL functions and aggregations the dashboard may call.
const FUNCTIONS: &[&str] = &[
    "sum",
    "max",
    "min",
    "avg",
    "count",
    "topk",
    "bottomk",
    "rate",
    "irate",
    "increase",
    "delta",
    "deriv",
    "abs",
    "clamp_min",
    "clamp_max",
    "histogram_quantile",
    "time",
    "vector",
    "scalar",
    "label_replace",
    "max_over_time",
    "min_over_time",
    "avg_over_time",
    "changes",
    "resets",
];
/// Keywords and modifiers; the grouping ones take a label list in parens.
const KEYWORDS: &[&str] = &[
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "group_left",
    "group_right",
];
const LABEL_LISTS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// The metric names a PromQL expression reads: identifiers outside label
/// matchers `{...}`, ranges `[...]` and strings that are neither functions,
/// keywords nor labels in a grouping list.
pub fn metric_names(expr: &str) -> BTreeSet<String> {
    let b = expr.as_bytes();
    let mut names = BTreeSet::new();
    let mut i = 0;
    let skip_to = |i: usize, close: u8| {
        let mut j = i;
        while j < b.len() && b[j] != close {
            j += 1;
        }
        j + 1
    };
    while i < b.len() {
        let c = b[i];
        match c {
            b'{' => i = skip_to(i, b'}'),
            b'[' => i = skip_to(i, b']'),
            b'"' => i = skip_to(i + 1, b'"'),
            b'$' => {
                i += 1;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                    i += 1;
                }
            }
            c if c.is_ascii_digit() => {
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'.') {
                    i += 1;
                }
            }
            c if c.is_ascii_alphabetic() || c == b'_' || c == b':' => {
                let start = i;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b':')
                {
                    i += 1;
                }
                let word = &expr[start..i];
                let mut j = i;
                while j < b.len() && b[j] == b' ' {
                    j += 1;
                }
                let call = j < b.len() && b[j] == b'(';
                if call && LABEL_LISTS.contains(&word) {
                    i = skip_to(j, b')');
                } else if call {
                    assert!(
                        FUNCTIONS.contains(&word),
                        "unknown function {word} in {expr}"
                    );
                // An aggregation before its grouping, `sum by (x) (...)`,
                // is a function too.
                } else if !KEYWORDS.contains(&word) && !FUNCTIONS.contains(&word) {
                    names.insert(word.to_string());
                }
            }
            _ => i += 1,
        }
    }
    names
}

/// Every PromQL expression of the dashboard, and the template variables'
/// `label_values(metric, label)` queries as `metric`.
pub fn dashboard_queries(d: &Value) -> Vec<String> {
    fn panels(list: &Value, out: &mut Vec<String>) {
        for p in list.as_array().into_iter().flatten() {
            for t in p["targets"].as_array().into_iter().flatten() {
                if let Some(e) = t["expr"].as_str() {
                    out.push(e.to_string());
                }
            }
            panels(&p["panels"], out);
        }
    }
    let mut out = Vec::new();
    panels(&d["panels"], &mut out);
    for v in d["templating"]["list"].as_array().into_iter().flatten() {
        if let Some(q) = v["definition"].as_str() {
            let inner = q
                .strip_prefix("label_values(")
                .and_then(|r| r.split(',').next())
                .unwrap_or_else(|| panic!("template query {q}: only label_values(metric, label)"));
            out.push(inner.trim().to_string());
        }
    }
    out
}
