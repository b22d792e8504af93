//! Project chores: `cargo xtask regen [--check]`, `cargo xtask bench`, `cargo xtask plot`,
//! `cargo xtask page`, `cargo xtask explore`, `cargo xtask variants`.

mod bench;
mod explore;
mod plot;
mod regen;
mod results;
mod variants;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "xtask", about = "DT project chores")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Write what the compiler makes of every library spec under dt-kernels/generated/.
    Regen {
        /// Change nothing; fail and name the stale files when they differ.
        #[arg(long)]
        check: bool,
    },
    /// Time the library kernels on the GPU next to cuBLAS, a copy, and the Python baselines.
    Bench {
        /// Only these ops (matmul, mm_leaky_relu, softmax, layernorm, dyt, attention).
        #[arg(long = "op")]
        ops: Vec<String>,
        /// Only these element types (f16, bf16, f32).
        #[arg(long = "dtype")]
        dtypes: Vec<String>,
        /// Also write the results as JSON here.
        #[arg(long)]
        json: Option<std::path::PathBuf>,
        /// Timed runs per row (fewer when a row's time budget runs out).
        #[arg(long, default_value_t = 50)]
        reps: usize,
        /// GPU seconds per row for DT's timed runs.
        #[arg(long, default_value_t = 2.0)]
        budget: f64,
        /// Only these baselines of bench/baselines.py (default: all).
        #[arg(long = "baseline")]
        baselines: Vec<String>,
        /// Only these shapes, as the table writes them (`128x65536`); a shape not in the fixed
        /// list is benched for every selected op whose shape has as many sizes.
        #[arg(long = "shape")]
        shapes: Vec<String>,
        /// Take the finished rows and baselines of this JSON (a run that stopped) and measure the
        /// rest; the rows are written back to it as they finish (unless --json names another).
        #[arg(long)]
        resume: Option<std::path::PathBuf>,
        /// Seconds the whole run may take: rows not started by then are listed as not run.
        #[arg(long = "total-budget")]
        total_budget: Option<f64>,
        /// Also write a results page here (Markdown: the machine, the command, the table and
        /// every baseline's time).
        #[arg(long)]
        markdown: Option<std::path::PathBuf>,
        /// Also draw the results here: `<op>.svg` per op, DT and every baseline per shape.
        #[arg(long)]
        plot: Option<std::path::PathBuf>,
    },
    /// Draw the JSON of earlier bench runs (`bench --json`): `<op>.svg` per op under --out.
    Plot {
        /// The JSON files; a row in a later one replaces the same op, shape and type in an earlier.
        json: Vec<std::path::PathBuf>,
        #[arg(long)]
        out: std::path::PathBuf,
    },
    /// Search schedules of one kernel of a spec: draw valid ones, check each against the
    /// reference, time the correct ones at a shape (GPU, else the generated C on the CPU), and
    /// report how many come near a baseline or the spec's own schedule, with the best as text.
    Explore {
        /// The spec (a `.dt` file).
        spec: std::path::PathBuf,
        /// The kernel to search.
        #[arg(long)]
        kernel: String,
        /// Sizes of the kernel's dimensions, `x` between them (the error names them in order).
        #[arg(long)]
        shape: String,
        #[arg(long, default_value = "f16")]
        dtype: String,
        /// Schedules to draw, the spec's own first.
        #[arg(long, default_value_t = 64)]
        samples: usize,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Seconds of timed runs per schedule.
        #[arg(long, default_value_t = 0.2)]
        budget: f64,
        /// Where outcomes are kept between runs (a rerun continues from them).
        #[arg(long, default_value = "target/explore-cache")]
        cache: std::path::PathBuf,
        /// The time (ms) of the fastest baseline at this shape, which the report compares with
        /// (from the bench's results page); without it, the spec's own schedule.
        #[arg(long = "baseline-ms")]
        baseline_ms: Option<f64>,
        /// Also draw the times (SVG) here.
        #[arg(long)]
        plot: Option<std::path::PathBuf>,
        /// Draw anywhere in the space of valid schedules (as the property tests do), not near
        /// the spec's own.
        #[arg(long)]
        anywhere: bool,
        /// Run no more schedules after this many seconds (building included): the report and
        /// the plot cover those that ran, and a rerun goes on from there (the cache).
        #[arg(long = "time-limit")]
        time_limit: Option<f64>,
    },
    /// Write every library and test spec reduced to each kernel, and schedules near each
    /// kernel's own, as `.dt` files (for `scripts/compare_compilers.sh`).
    Variants {
        #[arg(long)]
        out: std::path::PathBuf,
        /// Schedules drawn per kernel (those that do not check are left out).
        #[arg(long = "per-kernel", default_value_t = 6)]
        per_kernel: u64,
    },
    /// Write one results page (and its JSON) from the JSON of several bench runs.
    Page {
        /// The JSON files; a row in a later one replaces the same op, shape and type in an earlier.
        json: Vec<std::path::PathBuf>,
        /// The page to write (Markdown).
        #[arg(long)]
        markdown: std::path::PathBuf,
        /// The merged rows as JSON.
        #[arg(long = "merged-json")]
        merged_json: Option<std::path::PathBuf>,
        /// The machine the runs ran on, as the page names it.
        #[arg(long)]
        machine: String,
        /// The command of each run, in the order of the files.
        #[arg(long = "command")]
        commands: Vec<String>,
    },
}

/// `cargo xtask plot`: the rows of `files`, later ones replacing earlier ones of the same job.
fn plot_files(files: &[std::path::PathBuf], out: &std::path::Path) -> Result<(), String> {
    let rows = results::merged(files)?;
    for f in plot::plot(&rows, out)? {
        println!("wrote {}", f.display());
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Regen { check } => regen::run(check),
        Command::Bench { ops, dtypes, json, reps, budget, baselines, shapes, resume, total_budget, markdown, plot } => {
            bench::run(&bench::Options {
                ops,
                dtypes,
                json,
                reps,
                budget_s: budget,
                baselines,
                shapes,
                resume,
                total_budget_s: total_budget,
                markdown,
                plot,
            })
        }
        Command::Plot { json, out } => plot_files(&json, &out),
        Command::Explore { spec, kernel, shape, dtype, samples, seed, budget, cache, baseline_ms, plot, anywhere, time_limit } => (|| {
            let dtype = dt_core::DType::from_name(&dtype).ok_or_else(|| format!("unknown --dtype `{dtype}` (f16, bf16, f32)"))?;
            let shape = shape
                .split('x')
                .map(|n| n.trim().parse::<usize>().map_err(|_| format!("--shape `{shape}`: sizes are whole numbers between `x`")))
                .collect::<Result<Vec<_>, _>>()?;
            if baseline_ms.is_some_and(|ms| !(ms > 0.0 && ms.is_finite())) {
                return Err("--baseline-ms is a time in milliseconds above 0".to_string());
            }
            explore::run(&explore::Options {
                spec,
                kernel,
                shape,
                dtype,
                samples,
                seed,
                budget_s: budget,
                cache,
                baseline_ms,
                plot,
                near: !anywhere,
                time_limit_s: time_limit,
            })
            .map(|_| ())
        })(
        ),
        Command::Variants { out, per_kernel } => variants::run(&out, per_kernel).map(|n| println!("wrote {n} specs to {}", out.display())),
        Command::Page { json, markdown, merged_json, machine, commands } => results::merged(&json).and_then(|rows| {
            dt_codegen::host::write_atomically(&markdown, results::merged_markdown(&rows, &machine, &commands).as_bytes())
                .map_err(|e| format!("writing {}: {e}", markdown.display()))?;
            results::save(&rows, merged_json.as_deref())
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
