//! Collects measurements and writes `report.md` and `ratios.tsv` (for the
//! chart, drawn by `bench/chart.gp`).

use postgres::Client;
use std::fmt::Write as _;

/// One comparison: the extension's number against a baseline's, with the
/// target ratio from the issue.
pub struct Ratio {
    pub label: String,
    pub ratio: f64,
    pub target: f64,
    /// true when lower ratios are better (costs), false for throughput.
    pub lower_is_better: bool,
}

impl Ratio {
    pub fn met(&self) -> bool {
        if self.lower_is_better {
            self.ratio <= self.target
        } else {
            self.ratio >= self.target
        }
    }
}

pub struct Report {
    machine: String,
    sections: Vec<(String, String)>,
    ratios: Vec<Ratio>,
}

impl Report {
    pub fn new(client: &mut Client) -> Self {
        let version: String = client.query_one("SHOW server_version", &[]).unwrap().get(0);
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|info| {
                info.lines()
                    .find(|l| l.starts_with("model name"))
                    .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
            })
            .unwrap_or_default();
        let cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        let memory = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|info| {
                info.lines().next().map(|l| {
                    l.split_whitespace()
                        .nth(1)
                        .unwrap_or("0")
                        .parse::<f64>()
                        .unwrap_or(0.0)
                        / 1048576.0
                })
            })
            .unwrap_or(0.0);
        Report {
            machine: format!("{cores} cores ({cpu}), {memory:.0} GiB RAM, PostgreSQL {version}, everything on one machine over loopback"),
            sections: Vec::new(),
            ratios: Vec::new(),
        }
    }

    /// Adds a section with a markdown body (a table, usually).
    pub fn section(&mut self, title: &str, body: String) {
        self.sections.push((title.to_string(), body));
    }

    pub fn ratio(&mut self, label: &str, ratio: f64, target: f64, lower_is_better: bool) {
        self.ratios.push(Ratio {
            label: label.to_string(),
            ratio,
            target,
            lower_is_better,
        });
    }

    pub fn write(&self, dir: &str) {
        std::fs::create_dir_all(dir).unwrap();
        let mut md = String::new();
        writeln!(md, "# rate_limiter benchmark report\n").unwrap();
        writeln!(md, "Machine: {}.\n", self.machine).unwrap();
        writeln!(md, "## Ratios (extension / baseline, same run)\n").unwrap();
        writeln!(md, "| comparison | ratio | target | met |").unwrap();
        writeln!(md, "|---|---:|---:|:---:|").unwrap();
        let mut tsv = String::from("label\tratio\ttarget\n");
        for r in &self.ratios {
            let sign = if r.lower_is_better { "≤" } else { "≥" };
            writeln!(
                md,
                "| {} | {:.2}x | {sign} {:.2}x | {} |",
                r.label,
                r.ratio,
                r.target,
                if r.met() { "yes" } else { "**no**" }
            )
            .unwrap();
            writeln!(tsv, "\"{}\"\t{:.3}\t{:.2}", r.label, r.ratio, r.target).unwrap();
        }
        writeln!(md, "\n![ratios](chart.png)\n").unwrap();
        for (title, body) in &self.sections {
            writeln!(md, "## {title}\n\n{body}\n").unwrap();
        }
        std::fs::write(format!("{dir}/report.md"), md).unwrap();
        std::fs::write(format!("{dir}/ratios.tsv"), tsv).unwrap();
    }
}

/// Median of a non-empty slice.
pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    values[values.len() / 2]
}

/// The `p`-th percentile (0..=100) of a non-empty slice.
pub fn percentile(values: &mut [f64], p: f64) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    let index = ((p / 100.0) * (values.len() - 1) as f64).round() as usize;
    values[index]
}

/// Runs `measure(i)` `runs` times for each of `n` contenders, in an order
/// that rotates every run (so that none always goes first), and returns
/// each contender's median.
pub fn rotate(n: usize, runs: usize, mut measure: impl FnMut(usize) -> f64) -> Vec<f64> {
    let mut samples = vec![Vec::new(); n];
    for run in 0..runs {
        for turn in 0..n {
            let i = (run + turn) % n;
            samples[i].push(measure(i));
        }
    }
    samples.iter_mut().map(|runs| median(runs)).collect()
}
