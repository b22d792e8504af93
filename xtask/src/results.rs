//! The bench's rows: what each measured, the table it prints, and the JSON it keeps on disk.
//!
//! The JSON is rewritten (whole, through a temporary file and a rename) after every row and
//! every baseline timing, so a run stopped at any point leaves what it had measured; a run given
//! that file with `--resume` takes its finished rows and baselines from it and measures the rest.

use std::path::Path;

/// A time in milliseconds: four decimals below one millisecond, three from one up.
pub fn ms(m: f64) -> String {
    if m < 1.0 {
        format!("{m:.4}")
    } else {
        format!("{m:.3}")
    }
}

/// One job's results.
#[derive(Default, Clone, Debug, PartialEq)]
pub struct Row {
    pub op: String,
    /// The kernel (size-class variant) that ran.
    pub kernel: String,
    pub shape: String,
    pub dtype: String,
    pub dt_ms: Option<f64>,
    pub runs: usize,
    pub rate: String,
    pub best: Option<(String, f64)>,
    pub copy_fraction: Option<f64>,
    pub status: String,
    /// (name, ms, status) of each baseline timed.
    pub baselines: Vec<(String, Option<f64>, String)>,
}

/// The copy of the same bytes timed in this process, and the one `bench/baselines.py` times in
/// its own: each is the bandwidth its process sees, which the two processes do not always share
/// (docs/decisions/0002-bench-timing.md).
pub const DT_COPY: &str = "d2d_copy";
pub const PY_COPY: &str = "torch_copy";
/// Baselines this process times (the others come from `bench/baselines.py`).
const OWN_BASELINES: &[&str] = &[DT_COPY, "cublas", "cublas (matmul only)"];

impl Row {
    pub fn baseline_ms(&self, name: &str) -> Option<f64> {
        self.baselines.iter().find(|(n, _, _)| n == name).and_then(|b| b.1)
    }

    /// DT / best baseline with each time taken as a multiple of the copy timed in its own process.
    pub fn ratio_against_own_copies(&self) -> Option<f64> {
        let (dt, best) = (self.dt_ms?, self.best.as_ref()?.1);
        Some((dt / self.baseline_ms(DT_COPY)?) / (best / self.baseline_ms(PY_COPY)?))
    }

    /// Whether this row is the job of `op`, `shape` (as the table writes it) and `dtype`.
    pub fn is(&self, op: &str, shape: &str, dtype: &str) -> bool {
        self.op == op && self.shape == shape && self.dtype == dtype
    }

    /// Whether DT's timing of this row is done.
    pub fn measured(&self) -> bool {
        self.status == "ok" && self.dt_ms.is_some()
    }

    /// Whether `bench/baselines.py` has timed baseline `name` for this row (`None`: any of its
    /// baselines); one that failed (not installed, say) is tried again by a resumed run.
    pub fn has_python_baseline(&self, name: Option<&str>) -> bool {
        self.baselines.iter().any(|(n, ms, _)| ms.is_some() && !OWN_BASELINES.contains(&n.as_str()) && name.is_none_or(|x| x == n))
    }

    /// The row with the status of its run, after printing the progress line's end.
    pub fn finished(mut self, result: Result<(), String>) -> Row {
        self.status = match result {
            Ok(()) => "ok".into(),
            Err(e) => format!("failed: {e}"),
        };
        eprint!("{}", self.dt_ms.map_or(self.status.clone(), |ms| format!("{ms:.3} ms ({})", self.rate)));
        self
    }

    /// Picks the fastest baseline that is not a copy.
    pub fn pick_best(&mut self) {
        self.best = self
            .baselines
            .iter()
            .filter(|(n, ms, _)| ms.is_some() && n != DT_COPY && n != PY_COPY)
            .map(|(n, ms, _)| (n.clone(), ms.unwrap_or(f64::MAX)))
            .min_by(|a, b| a.1.total_cmp(&b.1));
    }
}

/// Where a run stands: rows done and to do, and time, for the progress line.
pub struct Progress {
    start: std::time::Instant,
    total: usize,
    /// Rows measured in this run (taken from a previous run's file they cost nothing).
    measured: usize,
}

impl Progress {
    pub fn new(total: usize) -> Progress {
        Progress { start: std::time::Instant::now(), total, measured: 0 }
    }

    /// Seconds since the run started.
    pub fn elapsed(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// Counts a row measured in this run.
    pub fn measured_one(&mut self) {
        self.measured += 1;
    }

    /// `elapsed 1m02s, about 3m10s left` after row `done` of the total (the rows left at the
    /// mean time of those measured so far).
    pub fn line(&self, done: usize) -> String {
        let elapsed = self.elapsed();
        let left = match self.measured {
            0 => String::new(),
            n => format!(", about {} left", clock(elapsed / n as f64 * self.total.saturating_sub(done) as f64)),
        };
        format!("elapsed {}{left}", clock(elapsed))
    }
}

fn clock(secs: f64) -> String {
    let s = secs.round() as u64;
    if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

/// Prints the table and, with `json`, writes the rows.
pub fn report(rows: &[Row], json: Option<&Path>) -> Result<(), String> {
    print_table(rows);
    save(rows, json)
}

/// Writes the rows to `json`, whole or not at all.
pub fn save(rows: &[Row], json: Option<&Path>) -> Result<(), String> {
    let Some(path) = json else { return Ok(()) };
    dt_codegen::host::write_atomically(path, to_json(rows).as_bytes())
}

pub fn print_table(rows: &[Row]) {
    print!("{}", table(rows));
}

/// The rows as a Markdown table, then the baselines that failed.
pub fn table(rows: &[Row]) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(out, "| op | kernel | shape | dtype | DT ms | DT rate | runs | best baseline | its ms | DT / best | copy fraction | DT / best, against own copies |");
    let _ = writeln!(out, "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for r in rows {
        let dt = r.dt_ms.map_or(r.status.clone(), ms);
        let (best, best_ms, ratio) = match (&r.best, r.dt_ms) {
            (Some((n, b)), Some(d)) => (n.clone(), ms(*b), format!("{:.2}", d / b)),
            (Some((n, b)), None) => (n.clone(), ms(*b), "-".into()),
            _ => ("-".into(), "-".into(), "-".into()),
        };
        let copy = r.copy_fraction.map_or("-".into(), |f| format!("{f:.2}"));
        let own = r.ratio_against_own_copies().map_or("-".into(), |f| format!("{f:.2}"));
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {dt} | {} | {} | {best} | {best_ms} | {ratio} | {copy} | {own} |",
            r.op, r.kernel, r.shape, r.dtype, r.rate, r.runs
        );
    }
    let failed: Vec<String> = rows
        .iter()
        .flat_map(|r| {
            r.baselines
                .iter()
                .filter(|(_, _, s)| s.starts_with("failed"))
                .map(move |(n, _, s)| format!("{} {} {} {n}: {s}", r.op, r.shape, r.dtype))
        })
        .collect();
    if !failed.is_empty() {
        let _ = writeln!(out, "\nbaselines that failed:");
        for f in failed {
            let _ = writeln!(out, "- {f}");
        }
    }
    out
}

/// A results page: where and how the rows were measured, then their table and every baseline's
/// time (`--markdown PATH`).
pub fn markdown(rows: &[Row], machine: &str, command: &str) -> String {
    page(
        rows,
        machine,
        &[command.to_string()],
        "Written by `cargo xtask bench --markdown`; every time is the median of CUDA-event-timed runs in one process tree.",
    )
}

/// A results page of rows from several runs (`cargo xtask page`): each run's command, then the
/// rows, each with the times of its own run.
pub fn merged_markdown(rows: &[Row], machine: &str, commands: &[String]) -> String {
    page(
        rows,
        machine,
        commands,
        "Written by `cargo xtask page` from the JSON of the runs below, a row of a later run replacing the same row of an earlier; every time is the median of CUDA-event-timed runs, and each row's DT and baseline times come from one process tree.",
    )
}

fn page(rows: &[Row], machine: &str, commands: &[String], how: &str) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(out, "# DT bench results\n");
    let _ = writeln!(out, "{how}\n");
    let _ = writeln!(out, "- machine: {machine}");
    for c in commands {
        let _ = writeln!(out, "- command: `{c}`");
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "{}", table(rows));
    let _ = writeln!(
        out,
        "## Every baseline (ms)
"
    );
    let _ = writeln!(out, "| op | shape | dtype | DT | baselines |");
    let _ = writeln!(out, "| --- | --- | --- | --- | --- |");
    for r in rows {
        let b: Vec<String> = r.baselines.iter().map(|(n, t, s)| format!("{n} {}", t.map_or(s.clone(), ms))).collect();
        let _ = writeln!(out, "| {} | {} | {} | {} | {} |", r.op, r.shape, r.dtype, r.dt_ms.map_or(r.status.clone(), ms), b.join(", "));
    }
    out
}

pub fn to_json(rows: &[Row]) -> String {
    let v: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| {
            serde_json::json!({
                "op": r.op, "kernel": r.kernel, "shape": r.shape, "dtype": r.dtype, "dt_ms": r.dt_ms, "runs": r.runs, "rate": r.rate, "status": r.status,
                "best_baseline": r.best.as_ref().map(|b| &b.0), "best_ms": r.best.as_ref().map(|b| b.1),
                "ratio_dt_over_best": match (&r.best, r.dt_ms) { (Some(b), Some(d)) => Some(d / b.1), _ => None },
                "copy_fraction": r.copy_fraction, "ratio_against_own_copies": r.ratio_against_own_copies(),
                "baselines": r.baselines.iter().map(|(n, ms, s)| serde_json::json!({"name": n, "ms": ms, "status": s})).collect::<Vec<_>>(),
            })
        })
        .collect();
    serde_json::to_string_pretty(&v).unwrap_or_default()
}

/// The rows of a file [`to_json`] wrote (for `--resume`); an error names the file.
/// The rows of `files`, a row of a later file replacing the same op, shape and type of an
/// earlier one in place.
pub fn merged(files: &[std::path::PathBuf]) -> Result<Vec<Row>, String> {
    let mut rows: Vec<Row> = Vec::new();
    for f in files {
        for r in from_json(f)? {
            match rows.iter().position(|x| x.is(&r.op, &r.shape, &r.dtype)) {
                Some(i) => rows[i] = r,
                None => rows.push(r),
            }
        }
    }
    Ok(rows)
}

pub fn from_json(path: &Path) -> Result<Vec<Row>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("{}: not the bench's JSON: {e}", path.display()))?;
    let rows = v.as_array().ok_or_else(|| format!("{}: not the bench's JSON: not a list of rows", path.display()))?;
    let text_of = |r: &serde_json::Value, k: &str| r[k].as_str().unwrap_or_default().to_string();
    Ok(rows
        .iter()
        .map(|r| {
            let mut row = Row {
                op: text_of(r, "op"),
                kernel: text_of(r, "kernel"),
                shape: text_of(r, "shape"),
                dtype: text_of(r, "dtype"),
                dt_ms: r["dt_ms"].as_f64(),
                runs: r["runs"].as_u64().unwrap_or(0) as usize,
                rate: text_of(r, "rate"),
                best: None,
                copy_fraction: r["copy_fraction"].as_f64(),
                status: text_of(r, "status"),
                baselines: r["baselines"]
                    .as_array()
                    .map(|b| b.iter().map(|x| (text_of(x, "name"), x["ms"].as_f64(), text_of(x, "status"))).collect())
                    .unwrap_or_default(),
            };
            row.pick_best();
            row
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a run wrote, a resumed run reads back as it was.
    #[test]
    fn rows_survive_the_json_file() {
        let mut row = Row {
            op: "softmax".into(),
            kernel: "softmax_4k".into(),
            shape: "4096x4096".into(),
            dtype: "f16".into(),
            dt_ms: Some(0.0276),
            runs: 50,
            rate: "2433 GB/s".into(),
            best: None,
            copy_fraction: Some(1.01),
            status: "ok".into(),
            baselines: vec![
                (DT_COPY.into(), Some(0.028), "ok".into()),
                ("liger".into(), Some(0.0275), "ok".into()),
                ("triton".into(), None, "failed: x".into()),
            ],
        };
        row.pick_best();
        let path = std::env::temp_dir().join(format!("dt-results-{}.json", std::process::id()));
        save(std::slice::from_ref(&row), Some(&path)).unwrap();
        let back = from_json(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        assert_eq!(back, vec![row.clone()]);
        assert!(back[0].measured() && back[0].has_python_baseline(None) && back[0].has_python_baseline(Some("liger")));
        assert!(!back[0].has_python_baseline(Some("torch_compile")) && !back[0].has_python_baseline(Some("triton")));
        assert_eq!(row.best, Some(("liger".into(), 0.0275)));
    }

    /// A page of several runs keeps the first run's order, each row from the last run that has it.
    #[test]
    fn merged_rows_take_the_later_run_in_place() {
        let row = |shape: &str, ms: f64| Row {
            op: "matmul".into(),
            kernel: "mm".into(),
            shape: shape.into(),
            dtype: "f16".into(),
            dt_ms: Some(ms),
            runs: 50,
            rate: String::new(),
            best: None,
            copy_fraction: None,
            status: "ok".into(),
            baselines: vec![("cublas".into(), Some(1.0), "ok".into())],
        };
        let dir = std::env::temp_dir();
        let (a, b) =
            (dir.join(format!("dt-merge-a-{}.json", std::process::id())), dir.join(format!("dt-merge-b-{}.json", std::process::id())));
        save(&[row("1x1x1", 1.0), row("2x2x2", 2.0)], Some(&a)).unwrap();
        save(&[row("1x1x1", 0.5), row("3x3x3", 3.0)], Some(&b)).unwrap();
        let rows = merged(&[a.clone(), b.clone()]).unwrap();
        let _ = (std::fs::remove_file(&a), std::fs::remove_file(&b));
        let got: Vec<(&str, Option<f64>)> = rows.iter().map(|r| (r.shape.as_str(), r.dt_ms)).collect();
        assert_eq!(got, vec![("1x1x1", Some(0.5)), ("2x2x2", Some(2.0)), ("3x3x3", Some(3.0))]);
        let page = merged_markdown(&rows, "a GPU", &["run a".into(), "run b".into()]);
        assert!(page.contains("- command: `run a`\n- command: `run b`"), "{page}");
    }
}
