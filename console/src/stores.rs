//! The object-store endpoints this process writes to, and how each has
//! fared, read from the process's own `floe_store_*` metrics (the store
//! pool records them per endpoint). In `floe standalone` that is the
//! broker's pool; a proxy of a cluster writes to no store, and each
//! broker's figures are on its own `/metrics`.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::rates::label;

/// One endpoint's figures since the process started.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct EndpointFigures {
    pub endpoint: String,
    /// Write attempts that succeeded (`floe_store_writes_total`).
    pub writes: f64,
    /// Write attempts abandoned: an error, the hard deadline, or another
    /// attempt of the same write landed first.
    pub abandoned: f64,
    /// Failed calls of any kind (put, get, head, delete, list).
    pub errors: f64,
    /// Writes that landed here after an attempt elsewhere was abandoned.
    pub failovers: f64,
    /// Write attempts that passed their adaptive deadline (so the bytes
    /// were also written elsewhere).
    pub hedged_writes: f64,
    /// Reads asked again beside a slow first one.
    pub hedged_reads: f64,
    /// Probes of the endpoint after it was benched, that passed and failed.
    pub probes_ok: f64,
    pub probes_failed: f64,
    /// Whether new writes skip it now.
    pub benched: bool,
    /// The adaptive deadline of a small write there now, in ms.
    pub write_deadline_ms: Option<f64>,
}

/// The endpoints named by `floe_store_*` series of a Prometheus text,
/// sorted by id.
pub fn endpoints(text: &str) -> Vec<EndpointFigures> {
    let mut by_id: BTreeMap<String, EndpointFigures> = BTreeMap::new();
    for line in text.lines() {
        if !line.starts_with("floe_store_") {
            continue;
        }
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let Some((name, labels)) = series.split_once('{') else {
            continue;
        };
        let labels = labels.trim_end_matches('}');
        let Some(endpoint) = label(labels, "endpoint") else {
            continue;
        };
        let e = by_id
            .entry(endpoint.to_string())
            .or_insert_with(|| EndpointFigures {
                endpoint: endpoint.to_string(),
                ..EndpointFigures::default()
            });
        match name {
            "floe_store_writes_total" => e.writes += value,
            "floe_store_abandoned_writes_total" => e.abandoned += value,
            "floe_store_errors_total" => e.errors += value,
            "floe_store_failovers_total" => e.failovers += value,
            "floe_store_hedged_writes_total" => e.hedged_writes += value,
            "floe_store_hedged_reads_total" => e.hedged_reads += value,
            "floe_store_probes_total" => match label(labels, "outcome") {
                Some("ok") => e.probes_ok += value,
                Some(_) => e.probes_failed += value,
                None => {}
            },
            "floe_store_endpoint_benched" => e.benched = value > 0.0,
            "floe_store_write_deadline_seconds" => e.write_deadline_ms = Some(value * 1000.0),
            _ => {}
        }
    }
    by_id.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_endpoint_sums_its_series() {
        let text = "\
# TYPE floe_store_writes_total counter
floe_store_writes_total{endpoint=\"local\"} 12
floe_store_writes_total{endpoint=\"s3-b\"} 3
floe_store_abandoned_writes_total{endpoint=\"s3-b\"} 2
floe_store_errors_total{endpoint=\"s3-b\",op=\"put\"} 2
floe_store_errors_total{endpoint=\"s3-b\",op=\"get\"} 1
floe_store_hedged_writes_total{endpoint=\"s3-b\"} 1
floe_store_probes_total{endpoint=\"s3-b\",outcome=\"failed\"} 1
floe_store_endpoint_benched{endpoint=\"s3-b\"} 1
floe_store_write_deadline_seconds{endpoint=\"local\"} 0.25
floe_cache_blocks_total{outcome=\"hit\"} 9
floe_proxy_requests_total{api=\"Produce\"} 4
";
        let eps = endpoints(text);
        assert_eq!(eps.len(), 2);
        assert_eq!(eps[0].endpoint, "local");
        assert_eq!(eps[0].writes, 12.0);
        assert!(!eps[0].benched);
        assert_eq!(eps[0].write_deadline_ms, Some(250.0));
        let b = &eps[1];
        assert_eq!((b.writes, b.abandoned, b.errors), (3.0, 2.0, 3.0));
        assert_eq!((b.hedged_writes, b.probes_failed), (1.0, 1.0));
        assert!(b.benched);
    }

    #[test]
    fn a_process_without_a_store_has_no_endpoints() {
        assert!(endpoints("floe_proxy_requests_total{api=\"Fetch\"} 1\n").is_empty());
        assert!(
            endpoints("floe_store_writes_total 5\nfloe_store_writes_total{endpoint=\"x\"} nope\n")
                .is_empty()
        );
    }
}
