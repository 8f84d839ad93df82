//! Lasso by coordinate descent, shared by `lasso-serial` and `lasso`: the design matrix by
//! columns ([`Column`], sparse or dense), data (the diabetes CSV, a synthetic sparse set
//! with correlated features), the objective, the duality gap, and the serial reference.
//!
//! The objective is `½‖y − Xβ‖² + λ‖β‖₁ + ½λ₂‖β‖²` with no `1/n` factor (λ₂ = 0, the
//! default, is the Lasso; λ₂ > 0 the elastic net. scikit-learn's `Lasso` minimises
//! `1/(2n)‖y − Xβ‖² + α‖β‖₁`, so `α = λ / n`). Both twins keep the residual `r = y − Xβ`
//! and update one coefficient at a time as glmnet does:
//! `β_j ← S(x_jᵀr + ‖x_j‖²β_j, λ) / (‖x_j‖² + λ₂)`, then `r −= x_j Δβ_j`.

use std::path::Path;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use strads_ap::formats::{libsvm_line, Csv};

use crate::data::LoadError;

/// One column of the design matrix: `vals[k]` at row `rows[k]`, or, with `rows` empty, a
/// dense column (`vals[i]` at row `i`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Column {
    /// Row of each value (empty for a dense column).
    pub rows: Vec<u32>,
    /// The values.
    pub vals: Vec<f64>,
}

impl Column {
    /// Whether the column stores every row.
    pub fn is_dense(&self) -> bool {
        self.rows.is_empty()
    }

    /// `‖x_j‖²`.
    pub fn norm2(&self) -> f64 {
        self.vals.iter().map(|v| v * v).sum()
    }

    /// `x_jᵀv` for a plain vector `v`.
    pub fn dot(&self, v: &[f64]) -> f64 {
        match self.is_dense() {
            true => self.vals.iter().zip(v).map(|(a, b)| a * b).sum(),
            false => self
                .rows
                .iter()
                .zip(&self.vals)
                .map(|(&i, a)| a * v[i as usize])
                .sum(),
        }
    }

    /// `x_jᵀx_k` of two columns (sparse ones by merging their sorted rows).
    pub fn dot_column(&self, other: &Column) -> f64 {
        match (self.is_dense(), other.is_dense()) {
            (true, true) => self.vals.iter().zip(&other.vals).map(|(a, b)| a * b).sum(),
            (false, true) => self.entries().map(|(i, v)| v * other.vals[i]).sum(),
            (true, false) => other.dot_column(self),
            (false, false) => {
                let (mut a, mut b, mut sum) = (0, 0, 0.0);
                while a < self.rows.len() && b < other.rows.len() {
                    match self.rows[a].cmp(&other.rows[b]) {
                        std::cmp::Ordering::Less => a += 1,
                        std::cmp::Ordering::Greater => b += 1,
                        std::cmp::Ordering::Equal => {
                            sum += self.vals[a] * other.vals[b];
                            a += 1;
                            b += 1;
                        }
                    }
                }
                sum
            }
        }
    }

    /// `(row, value)` pairs.
    pub fn entries(&self) -> impl Iterator<Item = (usize, f64)> + '_ {
        let dense = self.is_dense();
        self.vals
            .iter()
            .enumerate()
            .map(move |(k, &v)| (if dense { k } else { self.rows[k] as usize }, v))
    }
}

/// The soft-thresholding operator `S(z, t) = sign(z) max(|z| − t, 0)`.
#[inline]
pub fn soft(z: f64, t: f64) -> f64 {
    if z > t {
        z - t
    } else if z < -t {
        z + t
    } else {
        0.0
    }
}

/// A Lasso problem: columns, targets (centred), λ.
#[derive(Clone, Debug)]
pub struct Problem {
    /// Where it came from, for reports.
    pub name: String,
    /// The design matrix by columns.
    pub cols: Vec<Column>,
    /// Targets.
    pub y: Vec<f64>,
    /// The ℓ1 penalty λ.
    pub lambda: f64,
    /// The ℓ2 penalty λ₂ (0: the Lasso).
    pub l2: f64,
}

impl Problem {
    /// Samples.
    pub fn rows(&self) -> usize {
        self.y.len()
    }

    /// `λmax = ‖Xᵀy‖∞`, the smallest λ for which β = 0 is optimal.
    pub fn lambda_max(&self) -> f64 {
        self.cols
            .iter()
            .map(|c| c.dot(&self.y).abs())
            .fold(0.0, f64::max)
    }

    /// Sets λ = λmax / `ratio`.
    pub fn with_ratio(mut self, ratio: f64) -> Self {
        self.lambda = self.lambda_max() / ratio;
        self
    }

    /// Stored values of X.
    pub fn nonzeros(&self) -> usize {
        self.cols.iter().map(|c| c.vals.len()).sum()
    }

    /// `‖x_j‖²` per column.
    pub fn norms(&self) -> Vec<f64> {
        self.cols.iter().map(Column::norm2).collect()
    }
}

/// `½‖r‖² + λ‖β‖₁ + ½λ₂‖β‖²`.
pub fn objective(r: &[f64], beta: &[f64], lambda: f64, l2: f64) -> f64 {
    0.5 * r.iter().map(|v| v * v).sum::<f64>()
        + lambda * beta.iter().map(|b| b.abs()).sum::<f64>()
        + 0.5 * l2 * beta.iter().map(|b| b * b).sum::<f64>()
}

/// The duality gap divided by the primal objective, from the residual and
/// `max_j |x_jᵀr − λ₂β_j|` (`max_corr`, see [`max_correlation`]). The elastic net is the
/// Lasso of `[X; √λ₂ I]` and `[y; 0]`, whose residual is `[r; −√λ₂β]`: the dual point is
/// that residual over `s = max(1, max_corr / λ)`, with dual objective
/// `½‖y‖² − ½‖y − r/s‖² − ½λ₂‖β‖²/s²`.
pub fn relative_gap(
    y: &[f64],
    r: &[f64],
    beta: &[f64],
    lambda: f64,
    l2: f64,
    max_corr: f64,
) -> f64 {
    let primal = objective(r, beta, lambda, l2);
    let scale = (max_corr / lambda).max(1.0);
    let (mut yy, mut d) = (0.0, 0.0);
    for (&yi, &ri) in y.iter().zip(r) {
        let theta = ri / scale;
        yy += yi * yi;
        d += (yi - theta) * (yi - theta);
    }
    let bb: f64 = beta.iter().map(|b| b * b).sum();
    let dual = 0.5 * yy - 0.5 * d - 0.5 * l2 * bb / (scale * scale);
    ((primal - dual) / primal.abs().max(f64::MIN_POSITIVE)).max(0.0)
}

/// The most sweeps [`GapChecks`] lets pass between two measurements of the gap.
pub const MAX_GAP_SKIP: usize = 16;

/// When a solver measures its duality gap. A measurement costs a pass over X ([`max_correlation`]),
/// as much as the dot products of a whole sweep, so measuring after every sweep nearly
/// doubles a sparse solve; scikit-learn and glmnet do not either. After two measurements
/// the gap's rate of decrease per sweep is estimated, and the next measurement comes
/// halfway to the sweep where that rate reaches `tol` (at least the next sweep, at most
/// [`MAX_GAP_SKIP`] on). A solve still stops only on a measured gap at most `tol`; it may
/// run a few sweeps past the first one that would have passed (half the estimate's error).
///
/// ```
/// use strads_ap_examples::lasso::GapChecks;
/// let mut checks = GapChecks::new(1e-6);
/// assert!(checks.due(1));
/// checks.measured(1, 1e-1);
/// assert!(checks.due(2));
/// checks.measured(2, 1e-2); // a tenfold fall per sweep: 1e-6 is 4 sweeps away
/// assert!(!checks.due(3) && checks.due(4));
/// ```
#[derive(Clone, Debug)]
pub struct GapChecks {
    tol: f64,
    last: Option<(usize, f64)>,
    next: usize,
}

impl GapChecks {
    /// Checks for the target relative gap `tol`, the first after sweep 1.
    pub fn new(tol: f64) -> Self {
        GapChecks {
            tol,
            last: None,
            next: 1,
        }
    }

    /// Whether to measure the gap after sweep `sweep` (from 1).
    pub fn due(&self, sweep: usize) -> bool {
        sweep >= self.next
    }

    /// Notes the gap measured after `sweep`, and plans the next measurement.
    pub fn measured(&mut self, sweep: usize, gap: f64) {
        let skip = match self.last {
            Some((s0, g0)) if sweep > s0 && gap < g0 && gap > self.tol && gap > 0.0 => {
                // ln of the gap's factor per sweep (negative), and sweeps still to go.
                let per_sweep = (gap / g0).ln() / (sweep - s0) as f64;
                let left = (self.tol / gap).ln() / per_sweep;
                (left / 2.0).floor().clamp(1.0, MAX_GAP_SKIP as f64) as usize
            }
            _ => 1,
        };
        self.last = Some((sweep, gap));
        self.next = sweep + skip;
    }
}

/// `max_j |x_jᵀr − λ₂β_j|` (for the Lasso, `‖Xᵀr‖∞`).
pub fn max_correlation(cols: &[Column], r: &[f64], beta: &[f64], l2: f64) -> f64 {
    cols.iter()
        .zip(beta)
        .map(|(c, b)| (c.dot(r) - l2 * b).abs())
        .fold(0.0, f64::max)
}

/// The diabetes data (`../shared/data/lasso/diabetes.csv`: target first, ten features),
/// with the targets and the features centred and each feature scaled to unit norm.
///
/// # Errors
/// A missing file, or a line that is not 11 numbers, named by file and line.
pub fn load_csv(path: &Path) -> Result<Problem, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|e| LoadError::file(path, e.to_string()))?;
    // Numbers by position, spaces around them allowed: strads-ap's CSV line parser.
    let parse = Csv::new()
        .has_headers(false)
        .trim(true)
        .parser::<Vec<f64>>();
    let mut y = Vec::new();
    let mut feats: Vec<Vec<f64>> = Vec::new();
    for (no, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let vals = parse(line).map_err(|e| {
            LoadError::file(path, format!("line {}: {e}: {}", no + 1, excerpt(line)))
        })?;
        if vals.len() < 2 {
            return Err(LoadError::file(
                path,
                format!(
                    "line {}: expected a target and at least one feature",
                    no + 1
                ),
            ));
        }
        if feats.is_empty() {
            feats = vec![Vec::new(); vals.len() - 1];
        } else if vals.len() - 1 != feats.len() {
            return Err(LoadError::file(
                path,
                format!(
                    "line {}: {} features where earlier lines have {}",
                    no + 1,
                    vals.len() - 1,
                    feats.len()
                ),
            ));
        }
        y.push(vals[0]);
        for (f, v) in feats.iter_mut().zip(&vals[1..]) {
            f.push(*v);
        }
    }
    if y.is_empty() {
        return Err(LoadError::file(path, "no samples".to_string()));
    }
    center(&mut y);
    let cols = feats
        .into_iter()
        .map(|mut f| {
            center(&mut f);
            let norm = f.iter().map(|v| v * v).sum::<f64>().sqrt();
            if norm > 0.0 {
                f.iter_mut().for_each(|v| *v /= norm);
            }
            Column {
                rows: Vec::new(),
                vals: f,
            }
        })
        .collect();
    Ok(Problem {
        name: path.display().to_string(),
        cols,
        y,
        lambda: 0.0,
        l2: 0.0,
    })
}

/// A problem in the svmlight (libsvm) format, `y index:value ...` per sample with 1-based
/// feature indices, taken as it is (neither centred nor scaled: the file is the problem).
/// A column holding more than half the rows is stored dense. This is the format
/// [`write_svmlight`] writes and scikit-learn's `load_svmlight_file` reads, so peers solve
/// exactly the problem the twins solve.
///
/// # Errors
/// A missing file, or a malformed line (a bad number, an index of 0, indices not
/// increasing), named by file and line.
pub fn load_svmlight(path: &Path) -> Result<Problem, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|e| LoadError::file(path, e.to_string()))?;
    let mut y = Vec::new();
    let mut cols: Vec<Column> = Vec::new();
    for (no, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let bad = |what: String| {
            LoadError::file(path, format!("line {}: {what}: {}", no + 1, excerpt(line)))
        };
        // strads-ap's libsvm line parser: finite numbers, indices increasing; the values
        // in full precision, so that the file is the problem to the last bit.
        let sample = libsvm_line::<f64>(line).map_err(|e| bad(e.to_string()))?;
        if sample
            .features
            .first()
            .is_some_and(|&(index, _)| index == 0)
        {
            return Err(bad(
                "feature index 0 (svmlight indices start at 1)".to_string()
            ));
        }
        let row = y.len() as u32;
        y.push(sample.label);
        for (index, value) in sample.features {
            let index = index as usize;
            if index > cols.len() {
                cols.resize_with(index, Column::default);
            }
            if value != 0.0 {
                cols[index - 1].rows.push(row);
                cols[index - 1].vals.push(value);
            }
        }
    }
    if y.is_empty() {
        return Err(LoadError::file(path, "no samples".to_string()));
    }
    let rows = y.len();
    for c in &mut cols {
        if c.rows.len() * 2 > rows {
            let mut dense = vec![0.0; rows];
            for (i, v) in c.entries() {
                dense[i] = v;
            }
            *c = Column {
                rows: Vec::new(),
                vals: dense,
            };
        }
    }
    Ok(Problem {
        name: path.display().to_string(),
        cols,
        y,
        lambda: 0.0,
        l2: 0.0,
    })
}

/// Writes `p`'s X and y in the svmlight format (see [`load_svmlight`]), every value in the
/// shortest form that reads back to the same `f64`.
///
/// # Errors
/// The file cannot be written.
pub fn write_svmlight(p: &Problem, path: &Path) -> std::io::Result<()> {
    use std::io::Write;
    let mut by_row: Vec<Vec<(usize, f64)>> = vec![Vec::new(); p.rows()];
    for (j, c) in p.cols.iter().enumerate() {
        for (i, v) in c.entries() {
            if v != 0.0 {
                by_row[i].push((j + 1, v));
            }
        }
    }
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    for (yi, row) in p.y.iter().zip(&by_row) {
        write!(out, "{yi:?}")?;
        for (j, v) in row {
            write!(out, " {j}:{v:?}")?;
        }
        writeln!(out)?;
    }
    out.flush()
}

fn excerpt(line: &str) -> String {
    line.chars().take(60).collect()
}

fn center(v: &mut [f64]) {
    let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
    v.iter_mut().for_each(|x| *x -= mean);
}

/// A sparse high-dimensional problem with correlated features, as in the STRADS papers:
/// features come in groups of `group` that share most of their rows (a base column and
/// noisy copies of it), each column holds about `rows × density` values and is scaled to
/// unit norm; one feature in 100 has a true coefficient, and `y = Xβ* + noise`.
pub fn synthetic(rows: usize, features: usize, density: f64, seed: u64) -> Problem {
    let group = 4;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let per_col = ((rows as f64 * density).round() as usize).clamp(1, rows);
    let mut cols = Vec::with_capacity(features);
    let mut base: Vec<u32> = Vec::new();
    for j in 0..features {
        let mut rows_j: Vec<u32> = if j % group == 0 {
            base = (0..per_col)
                .map(|_| rng.gen_range(0..rows as u32))
                .collect();
            base.clone()
        } else {
            // A copy of the group's base: keeps each row with probability 0.8, adds others.
            let mut kept: Vec<u32> = base.iter().copied().filter(|_| rng.gen_bool(0.8)).collect();
            kept.extend((0..per_col / 5).map(|_| rng.gen_range(0..rows as u32)));
            kept
        };
        rows_j.sort_unstable();
        rows_j.dedup();
        let mut vals: Vec<f64> = rows_j.iter().map(|_| rng.gen_range(0.5..1.5)).collect();
        let norm = vals.iter().map(|v| v * v).sum::<f64>().sqrt();
        vals.iter_mut().for_each(|v| *v /= norm);
        cols.push(Column { rows: rows_j, vals });
    }
    let mut y = vec![0.0; rows];
    for (j, c) in cols.iter().enumerate() {
        if j % 100 == 7 {
            let b = rng.gen_range(-2.0..2.0);
            for (i, v) in c.entries() {
                y[i] += b * v;
            }
        }
    }
    for v in &mut y {
        *v += rng.gen_range(-0.05..0.05);
    }
    Problem {
        name: format!("synthetic {rows}x{features} density {density}"),
        cols,
        y,
        lambda: 0.0,
        l2: 0.0,
    }
}

/// STRADS's dependency structure: for each feature `j`, the features `k` with
/// `|x_jᵀx_k| ≥ rho` (both ways), computed once by accumulating products row by row
/// (cost: half the sum over rows of the squared number of values in the row, spread over
/// the machine's cores with rayon).
pub fn correlation_graph(cols: &[Column], rows: usize, rho: f64) -> Vec<Vec<u32>> {
    use rayon::prelude::*;
    // The matrix by rows, each row's features in increasing order.
    let mut by_row: Vec<Vec<(u32, f64)>> = vec![Vec::new(); rows];
    for (j, c) in cols.iter().enumerate() {
        for (i, v) in c.entries() {
            by_row[i].push((j as u32, v));
        }
    }
    // For each j, the k > j above the threshold (a scratch accumulator per thread).
    let upper: Vec<Vec<u32>> = (0..cols.len())
        .into_par_iter()
        .map_init(
            || (vec![0.0f64; cols.len()], Vec::<u32>::new()),
            |(acc, touched), j| {
                for (i, v) in cols[j].entries() {
                    let row = &by_row[i];
                    let after = row.partition_point(|&(k, _)| k as usize <= j);
                    for &(k, w) in &row[after..] {
                        if acc[k as usize] == 0.0 {
                            touched.push(k);
                        }
                        acc[k as usize] += v * w;
                    }
                }
                let mut above: Vec<u32> = Vec::new();
                for &k in touched.iter() {
                    if acc[k as usize].abs() >= rho {
                        above.push(k);
                    }
                    acc[k as usize] = 0.0;
                }
                touched.clear();
                above.sort_unstable();
                above
            },
        )
        .collect();
    let mut graph: Vec<Vec<u32>> = vec![Vec::new(); cols.len()];
    for (j, ks) in upper.iter().enumerate() {
        for &k in ks {
            graph[j].push(k);
            graph[k as usize].push(j as u32);
        }
    }
    graph
}

/// The serial program's coordinate update of `β_j`, on plain vectors.
pub fn update(j: usize, p: &Problem, norms: &[f64], r: &mut [f64], beta: &mut [f64]) {
    let col = &p.cols[j];
    if norms[j] == 0.0 {
        return;
    }
    let rho = col.dot(r) + norms[j] * beta[j];
    let new = soft(rho, p.lambda) / (norms[j] + p.l2);
    let delta = new - beta[j];
    if delta != 0.0 {
        for (i, v) in col.entries() {
            r[i] -= v * delta;
        }
        beta[j] = new;
    }
}

/// Serial cyclic coordinate descent to a relative duality gap of `tol` (measured after the
/// sweeps [`GapChecks`] picks): the residual, β and the sweeps run.
pub fn solve_cyclic(p: &Problem, tol: f64, max_sweeps: usize) -> (Vec<f64>, Vec<f64>, usize) {
    let norms = p.norms();
    let mut r = p.y.clone();
    let mut beta = vec![0.0; p.cols.len()];
    let mut checks = GapChecks::new(tol);
    for sweep in 1..=max_sweeps {
        for j in 0..p.cols.len() {
            update(j, p, &norms, &mut r, &mut beta);
        }
        if !checks.due(sweep) {
            continue;
        }
        let max_corr = max_correlation(&p.cols, &r, &beta, p.l2);
        let gap = relative_gap(&p.y, &r, &beta, p.lambda, p.l2, max_corr);
        if gap <= tol {
            return (r, beta, sweep);
        }
        checks.measured(sweep, gap);
    }
    (r, beta, max_sweeps)
}

/// Whether `path` names an svmlight file (`.svm`, `.svmlight`, `.libsvm`).
pub fn is_svmlight(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("svm" | "svmlight" | "libsvm")
    )
}

/// Where a run's data come from: `--data PATH` (an svmlight file, see [`load_svmlight`],
/// or a CSV like diabetes, see [`load_csv`]), or the synthetic generator.
pub fn load(
    data: Option<&Path>,
    rows: usize,
    features: usize,
    density: f64,
    seed: u64,
    ratio: f64,
    l2: f64,
) -> Result<Problem, LoadError> {
    let p = match data {
        Some(path) if is_svmlight(path) => load_svmlight(path)?,
        Some(path) => load_csv(path)?,
        None => synthetic(rows, features, density, seed),
    };
    Ok(Problem {
        l2,
        ..p.with_ratio(ratio)
    })
}

/// With `--write-problem FILE`: writes `p` there (see [`write_svmlight`]), prints its
/// λ and λ₂ as a JSON line, and returns `true` (the binary then stops).
///
/// # Errors
/// The file cannot be written.
pub fn write_problem_if_asked(p: &Problem, path: Option<&Path>) -> anyhow::Result<bool> {
    let Some(path) = path else { return Ok(false) };
    write_svmlight(p, path)
        .map_err(|e| anyhow::anyhow!("cannot write the problem to {}: {e}", path.display()))?;
    println!(
        "{}",
        serde_json::json!({
            "problem": path.display().to_string(),
            "samples": p.rows(),
            "features": p.cols.len(),
            "lambda": p.lambda,
            "l2": p.l2,
        })
    );
    Ok(true)
}

/// The indices of the nonzero coefficients, for problems of at most 1000 features.
pub fn support(beta: &[f64]) -> Option<Vec<usize>> {
    (beta.len() <= 1000).then(|| (0..beta.len()).filter(|&j| beta[j] != 0.0).collect())
}

/// The final JSON line of both twins.
#[derive(Clone, Debug, Serialize)]
pub struct LassoResult {
    /// `"lasso"`.
    pub app: String,
    /// `"serial"` or `"strads-ap"`.
    #[serde(rename = "impl")]
    pub implementation: String,
    /// The data set.
    pub data: String,
    /// Ranks and worker threads.
    pub ranks: usize,
    /// Worker threads.
    pub threads: usize,
    /// How coordinates were chosen: `cyclic`, `uniform` or `priority`.
    pub order: String,
    /// λ.
    pub lambda: f64,
    /// λ₂ (0 for the Lasso).
    pub l2: f64,
    /// The final objective.
    pub objective: f64,
    /// The final relative duality gap.
    pub gap: f64,
    /// Nonzero coefficients.
    pub nonzeros: usize,
    /// Which coefficients are nonzero (problems of at most 1000 features).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub support: Option<Vec<usize>>,
    /// Coordinate updates run.
    pub updates: u64,
    /// Seconds of the solve, gap checks included, set-up excluded.
    pub secs: f64,
    /// The same (the bench runner counts a solve as one epoch).
    pub secs_per_epoch: f64,
    /// Seconds of set-up (loading excluded): the strads-ap twin's reconnaissance and
    /// planning.
    pub setup_secs: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_svmlight_file_holds_the_problem_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.svm");
        let mut p = synthetic(50, 40, 0.1, 3);
        // One dense column, to check that dense columns come back dense.
        p.cols[5] = Column {
            rows: Vec::new(),
            vals: (0..50).map(|i| i as f64 / 7.0 + 0.1).collect(),
        };
        write_svmlight(&p, &path).unwrap();
        let q = load(Some(&path), 0, 0, 0.0, 0, 20.0, 0.0).unwrap();
        assert_eq!(q.y, p.y);
        assert_eq!(q.cols, p.cols);
        assert_eq!(q.lambda, p.clone().with_ratio(20.0).lambda);
    }

    #[test]
    fn a_malformed_svmlight_line_is_named() {
        let dir = tempfile::tempdir().unwrap();
        for (text, says) in [
            (
                "1 1:2 3:4\n2 2:x\n",
                "line 2: feature value `x` of index 2 is not a number",
            ),
            ("1 0:2\n", "line 1: feature index 0"),
            ("1 3:2 2:1\n", "line 1: feature index 2 after 3"),
            ("1 2:1 2:1\n", "line 1: feature index 2 after 2"),
            ("one 1:2\n", "line 1: label `one` is not a number"),
            ("1 7\n", "line 1: feature `7` is not of the form idx:val"),
            (
                "1 1:nan\n",
                "line 1: feature value `nan` of index 1 is not a finite",
            ),
        ] {
            let path = dir.path().join("bad.svm");
            std::fs::write(&path, text).unwrap();
            let err = load_svmlight(&path).unwrap_err().to_string();
            assert!(
                err.contains("bad.svm") && err.contains(says),
                "{text:?}: {err}"
            );
        }
    }

    #[test]
    fn the_gap_closes_and_the_support_is_sparse() {
        let p = synthetic(300, 400, 0.05, 1).with_ratio(20.0);
        let (r, beta, sweeps) = solve_cyclic(&p, 1e-8, 1000);
        let max_corr = max_correlation(&p.cols, &r, &beta, 0.0);
        let gap = relative_gap(&p.y, &r, &beta, p.lambda, 0.0, max_corr);
        assert!(gap <= 1e-8, "gap {gap} after {sweeps} sweeps");
        let nz = beta.iter().filter(|b| **b != 0.0).count();
        assert!(nz > 0 && nz < 200, "{nz} nonzeros");
        // Optimality: |x_jᵀr| ≤ λ everywhere (up to the gap).
        assert!(max_corr <= p.lambda * (1.0 + 1e-3));
    }

    #[test]
    fn the_elastic_net_gap_closes_too() {
        let p = Problem {
            l2: 0.5,
            ..synthetic(200, 300, 0.05, 2).with_ratio(10.0)
        };
        let (r, beta, sweeps) = solve_cyclic(&p, 1e-9, 2000);
        let gap = relative_gap(
            &p.y,
            &r,
            &beta,
            p.lambda,
            p.l2,
            max_correlation(&p.cols, &r, &beta, p.l2),
        );
        assert!(gap <= 1e-9, "gap {gap} after {sweeps} sweeps");
        // Optimality of a nonzero coordinate: x_jᵀr − λ₂β_j = λ sign(β_j).
        for (j, b) in beta.iter().enumerate().filter(|(_, b)| **b != 0.0) {
            let g = p.cols[j].dot(&r) - p.l2 * b;
            assert!(
                (g - p.lambda * b.signum()).abs() <= 1e-3 * p.lambda,
                "{j}: {g}"
            );
        }
    }

    #[test]
    fn the_correlation_graph_lists_the_pairs_above_rho() {
        let p = synthetic(200, 60, 0.1, 3);
        let g = correlation_graph(&p.cols, p.rows(), 0.3);
        for (j, listed_j) in g.iter().enumerate() {
            for k in 0..60 {
                let listed = listed_j.contains(&(k as u32));
                let corr = p.cols[j].dot_column(&p.cols[k]).abs();
                if j != k {
                    assert_eq!(listed, corr >= 0.3, "{j} {k}: {corr}");
                }
            }
        }
        // The synthetic groups are correlated.
        assert!(g[0].contains(&1));
    }

    #[test]
    fn a_malformed_csv_line_is_named() {
        let dir = std::env::temp_dir().join(format!("lasso-csv-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bad.csv");
        std::fs::write(&path, "1,2,3\n4,x,6\n").unwrap();
        let e = load_csv(&path).unwrap_err().to_string();
        assert!(e.contains("bad.csv") && e.contains("line 2"), "{e}");
        std::fs::write(&path, "1,2,3\n4,5\n").unwrap();
        let e = load_csv(&path).unwrap_err().to_string();
        assert!(
            e.contains("line 2: 1 features where earlier lines have 2"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
