//! The table of primary objects and their status `dev` shows whenever
//! things settle: what a person watching the loop wants to see at a glance.

use std::sync::Arc;

use reconciler_contract::object_meta::MetadataField;
use serde_json::Value;

use crate::engine::Engine;

/// The primary objects of every plugin, with their status, as a table.
pub fn primaries_table<B: crate::cluster::ClusterBackend>(engine: &Engine<B>) -> String {
    let header = ["PLUGIN", "KIND", "NAMESPACE", "NAME", "STATUS"].map(String::from);
    let rows: Vec<Vec<String>> = primary_rows(engine).into_iter().map(Vec::from).collect();
    render_table(header.into(), rows)
}

/// [`primaries_table`] of several clusters, each row naming its cluster.
pub fn clusters_table<B: crate::cluster::ClusterBackend>(
    engines: &[(String, Arc<Engine<B>>)],
) -> String {
    let header = ["CLUSTER", "PLUGIN", "KIND", "NAMESPACE", "NAME", "STATUS"].map(String::from);
    let rows = engines
        .iter()
        .flat_map(|(cluster, engine)| {
            primary_rows(engine).into_iter().map(move |row| {
                std::iter::once(cluster.clone())
                    .chain(row)
                    .collect::<Vec<String>>()
            })
        })
        .collect();
    render_table(header.into(), rows)
}

/// A row per primary object of every plugin: plugin, kind, namespace,
/// name, status (cut to 100 characters).
fn primary_rows<B: crate::cluster::ClusterBackend>(engine: &Engine<B>) -> Vec<[String; 5]> {
    let mut rows = Vec::new();
    for plugin in engine.plugins().iter() {
        let m = plugin.metadata();
        for object in engine.cache().list(&m.primary) {
            let s = |p: &str| {
                object
                    .pointer(p)
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string()
            };
            let mut status = object
                .get("status")
                .map(Value::to_string)
                .unwrap_or_else(|| "-".into());
            if object.metadata_field("deletionTimestamp").is_some() {
                status = format!("(deleting) {status}");
            }
            if status.chars().count() > 100 {
                status = status.chars().take(97).collect::<String>() + "...";
            }
            rows.push([
                m.name.clone(),
                m.primary.kind.clone(),
                s("/metadata/namespace"),
                s("/metadata/name"),
                status,
            ]);
        }
    }
    rows
}

/// Columns padded to their widest cell; a line when there are no rows.
fn render_table(header: Vec<String>, rows: Vec<Vec<String>>) -> String {
    if rows.is_empty() {
        return "(no primary objects yet)\n".into();
    }
    let all: Vec<Vec<String>> = std::iter::once(header).chain(rows).collect();
    let widths: Vec<usize> = (0..all[0].len())
        .map(|c| all.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in all {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:w$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}
