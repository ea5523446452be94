//! Collects measurements and writes `report.md` and `ratios.tsv` (for the
//! chart, drawn by `bench/chart.gp`).
//!
//! Every figure is a [`Samples`]: one value per round. Rounds interleave the
//! contenders ([`rotate`]), and the report shows each figure as the median
//! with the minimum and maximum of its rounds.

use postgres::Client;
use std::fmt::Write as _;

/// The values one figure took, one per round (never empty).
#[derive(Clone, Debug)]
pub struct Samples(Vec<f64>);

impl Samples {
    /// Panics on an empty list: every figure is measured at least once.
    pub fn new(values: Vec<f64>) -> Self {
        assert!(!values.is_empty(), "a figure without a measurement");
        Samples(values)
    }

    fn sorted(&self) -> Vec<f64> {
        let mut values = self.0.clone();
        values.sort_by(|a, b| a.total_cmp(b));
        values
    }

    /// The median (the upper one of an even count).
    pub fn median(&self) -> f64 {
        let values = self.sorted();
        values[values.len() / 2]
    }

    pub fn min(&self) -> f64 {
        self.sorted()[0]
    }

    pub fn max(&self) -> f64 {
        *self.sorted().last().unwrap()
    }

    /// The values in round order.
    pub fn values(&self) -> &[f64] {
        &self.0
    }

    /// `f(self[r], other[r])` for every round r: the per-round ratio of two
    /// contenders measured in the same rounds.
    pub fn zip(&self, other: &Samples, f: impl Fn(f64, f64) -> f64) -> Samples {
        assert_eq!(self.0.len(), other.0.len(), "figures from different rounds");
        Samples::new(
            self.0
                .iter()
                .zip(&other.0)
                .map(|(a, b)| f(*a, *b))
                .collect(),
        )
    }

    /// Each value divided by the same round's value of `other`.
    pub fn ratio_to(&self, other: &Samples) -> Samples {
        self.zip(other, |a, b| a / b)
    }

    /// Each value divided by the sum of the same round's values of `a`
    /// and `b`.
    pub fn ratio_to_sum(&self, a: &Samples, b: &Samples) -> Samples {
        self.ratio_to(&a.zip(b, |a, b| a + b))
    }

    /// `median (min–max)` with `decimals` decimals; just the value when
    /// there is one round.
    pub fn show(&self, decimals: usize) -> String {
        if self.0.len() == 1 {
            return format!("{:.*}", decimals, self.0[0]);
        }
        format!(
            "{:.*} ({:.*}–{:.*})",
            decimals,
            self.median(),
            decimals,
            self.min(),
            decimals,
            self.max()
        )
    }
}

/// One comparison, usually against the target: the extension's
/// figure divided by a baseline's from the same round (unit `x`), sometimes
/// a difference in percentage points (unit ` pp`).
pub struct Target {
    pub label: String,
    pub samples: Samples,
    /// `None` for a comparison reported without a target.
    pub target: Option<f64>,
    /// true when lower values are better (costs), false for throughput.
    pub lower_is_better: bool,
    pub unit: &'static str,
}

impl Target {
    /// Whether the median meets the target (`None` without one).
    pub fn met(&self) -> Option<bool> {
        let value = self.samples.median();
        self.target.map(|target| {
            if self.lower_is_better {
                value <= target
            } else {
                value >= target
            }
        })
    }
}

pub struct Report {
    machine: String,
    sections: Vec<(String, String)>,
    targets: Vec<Target>,
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
            targets: Vec::new(),
        }
    }

    /// Adds a section with a markdown body (a table, usually).
    pub fn section(&mut self, title: &str, body: String) {
        self.sections.push((title.to_string(), body));
    }

    /// Adds a scenario's section: its body, then what the scenario shows
    /// and what it does not show.
    pub fn scenario(&mut self, title: &str, body: String, shows: &str, does_not_show: &str) {
        self.section(
            title,
            format!(
                "{}\n\nWhat this shows: {shows} What it does not show: {does_not_show}\n",
                body.trim_end()
            ),
        );
    }

    /// A ratio (unit `x`) against its target.
    pub fn ratio(&mut self, label: &str, samples: Samples, target: f64, lower_is_better: bool) {
        self.target(label, samples, target, lower_is_better, "x");
    }

    /// A ratio (unit `x`) that the issue gives no target for.
    pub fn ratio_without_target(&mut self, label: &str, samples: Samples) {
        self.targets.push(Target {
            label: label.to_string(),
            samples,
            target: None,
            lower_is_better: true,
            unit: "x",
        });
    }

    /// Any figure against its target, in `unit`.
    pub fn target(
        &mut self,
        label: &str,
        samples: Samples,
        target: f64,
        lower_is_better: bool,
        unit: &'static str,
    ) {
        self.targets.push(Target {
            label: label.to_string(),
            samples,
            target: Some(target),
            lower_is_better,
            unit,
        });
    }

    pub fn write(&self, dir: &str) {
        std::fs::create_dir_all(dir).unwrap();
        let mut md = String::new();
        writeln!(md, "# rate_limiter benchmark report\n").unwrap();
        writeln!(md, "Machine: {}.\n", self.machine).unwrap();
        writeln!(
            md,
            "## Targets (same run; median of the rounds, min–max in brackets)\n"
        )
        .unwrap();
        writeln!(md, "| comparison | value | target | met |").unwrap();
        writeln!(md, "|---|---:|---:|:---:|").unwrap();
        let mut tsv = String::from("label\tratio\ttarget\n");
        for t in &self.targets {
            let sign = if t.lower_is_better { "≤" } else { "≥" };
            let unit = t.unit;
            let (target, met) = match (t.target, t.met()) {
                (Some(target), Some(met)) => (
                    format!("{sign} {target:.2}{unit}"),
                    if met { "yes" } else { "**no**" },
                ),
                _ => ("—".to_string(), "—"),
            };
            writeln!(
                md,
                "| {} | {}{unit} | {target} | {met} |",
                t.label,
                t.samples.show(2),
            )
            .unwrap();
            // The chart shows the ratios that have a target.
            if let (Some(target), "x") = (t.target, unit) {
                writeln!(
                    tsv,
                    "\"{}\"\t{:.3}\t{:.2}",
                    t.label,
                    t.samples.median(),
                    target
                )
                .unwrap();
            }
        }
        writeln!(md, "\n![ratios](chart.png)\n").unwrap();
        for (title, body) in &self.sections {
            writeln!(md, "## {title}\n\n{body}\n").unwrap();
        }
        std::fs::write(format!("{dir}/report.md"), md).unwrap();
        std::fs::write(format!("{dir}/ratios.tsv"), tsv).unwrap();
    }
}

/// The `p`-th percentile (0..=100) of a non-empty slice.
pub fn percentile(values: &mut [f64], p: f64) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    let index = ((p / 100.0) * (values.len() - 1) as f64).round() as usize;
    values[index]
}

/// Runs `measure(i)` `rounds` times for each of `n` contenders, in an order
/// that rotates every round (so that none always goes first), and returns
/// each contender's samples, in round order.
pub fn rotate(n: usize, rounds: usize, mut measure: impl FnMut(usize) -> f64) -> Vec<Samples> {
    let mut samples = vec![Vec::new(); n];
    for round in 0..rounds {
        for turn in 0..n {
            let i = (round + turn) % n;
            samples[i].push(measure(i));
        }
    }
    samples.into_iter().map(Samples::new).collect()
}
