//! The rules a loop body must follow, checked before expansion. All violations are
//! reported together, each at the user's code.

use syn::visit::{self, Visit};
use syn::{Error, Lifetime};

use crate::ast::{Input, LoopKind};
use quote::ToTokens;
use syn::ext::IdentExt;
use syn::spanned::Spanned;

use crate::captures::{Analysis, Assignment, Form, MacroArgs};

/// A captured variable the body accumulates into (see `strads_ap::async_for!`).
pub(crate) struct ReductionVar {
    /// The variable, as first captured.
    pub name: String,
    pub form: Form,
    /// The first assignment, where errors about the reduction point.
    pub span: proc_macro2::Span,
}

/// Checks the loop body of `input`, given what the capture analysis found; returns the
/// captured variables the body accumulates into.
pub(crate) fn check(input: &Input, analysis: &Analysis) -> syn::Result<Vec<ReductionVar>> {
    let kind = input.kind;
    let mut errors = Vec::new();
    let mut reductions: Vec<ReductionVar> = Vec::new();

    for assignment in &analysis.assignments {
        let name = assignment.name.unraw().to_string();
        if let Form::Other = assignment.form {
            errors.push(Error::new_spanned(
                &assignment.whole,
                not_a_reduction(kind, &name, assignment),
            ));
            continue;
        }
        match reductions.iter().find(|r| r.name == name) {
            Some(r) if !r.form.same_as(&assignment.form) => {
                errors.push(Error::new_spanned(
                    &assignment.whole,
                    format!(
                        "captured variable `{name}` is accumulated in two ways inside `{}`, \
                         {} and {}: a reduction variable is combined across workers one \
                         way; use one form, or two variables",
                        kind.macro_name(),
                        r.form.describe(&name),
                        assignment.form.describe(&name),
                    ),
                ));
            }
            Some(_) => {}
            None => reductions.push(ReductionVar {
                name,
                form: assignment.form.clone(),
                span: assignment.whole.span(),
            }),
        }
    }
    // A variable assigned in a way that is no reduction is an error already.
    reductions.retain(|r| {
        !analysis
            .assignments
            .iter()
            .any(|a| matches!(a.form, Form::Other) && a.name.unraw() == r.name)
    });

    // A reduction read in the body is its group's running part, not the serial loop's
    // running value: refused, once per variable (a new user's averaged perceptron read
    // its example counter `c += 1.0` as `c * x`, right on one thread and wrong on two).
    for r in &reductions {
        if let Some(read) = analysis.reads.iter().find(|i| i.unraw() == r.name) {
            errors.push(Error::new(read.span(), read_reduction(kind, &r.name)));
        }
    }

    if let Some(span) = analysis.self_uses.first() {
        errors.push(Error::new(
            *span,
            "`self` cannot be captured by a loop body; bind the field you need to a local \
             variable before the loop",
        ));
    }

    let mut flow = ControlFlow {
        kind,
        loop_depth: 0,
        labels: Vec::new(),
        errors: &mut errors,
    };
    flow.visit_expr(&input.body.body);

    errors
        .into_iter()
        .reduce(|mut all, e| {
            all.combine(e);
            all
        })
        .map_or(Ok(reductions), Err)
}

/// The error for a read of reduction variable `name` inside the body.
fn read_reduction(kind: LoopKind, name: &str) -> String {
    let instead = match kind {
        LoopKind::Async => "the loop index instead (an example counter: `epoch * n + k + 1`)",
        LoopKind::Sync => {
            "the data instead (an example counter: a position stored with each example)"
        }
    };
    format!(
        "captured variable `{name}` is accumulated inside `{}` (a reduction: each group of \
         tasks adds into a part of its own, and the parts are combined after the call), so \
         read here it holds only its group's part so far, not the serial loop's running \
         value, and the result would change with the workers. Compute the value from \
         {instead}, or read `{name}` only after the loop",
        kind.macro_name(),
    )
}

/// The error for an assignment to a captured variable that is no reduction.
fn not_a_reduction(kind: LoopKind, name: &str, assignment: &Assignment) -> String {
    let across = match kind {
        LoopKind::Async => "indices",
        LoopKind::Sync => "mini-batches",
    };
    let lost = format!(
        "inside `{}`: the loop body runs on many threads and ranks, each with its own copy \
         of plain captured values, so the change would be lost.",
        kind.macro_name()
    );
    let keyed = "To keep a value per key (per user, per word), use a DVector with one \
                 element per key and write it through indexing (`counts[w] += 1`); a single \
                 total that every index writes belongs in a reduction, not a one-element \
                 DVector, which would make the indices wait for each other.";
    match &assignment.target {
        syn::Expr::Path(_) => format!(
            "cannot assign to captured variable `{name}` {lost} To accumulate across \
             {across}, write a reduction (`{name} += e`, also `-=`, `*=`, `|=`, `&=`, `^=`; \
             or `{name} = {name}.max(e)`, `{name} = f({name}, e)`): each worker's part is \
             combined into `{name}` after the loop. {keyed}"
        ),
        part => format!(
            "cannot assign to a part of captured variable `{name}` {lost} A reduction is a \
             plain variable: bind the part to one before the loop (`let mut x = {};`), \
             accumulate into it in the body (`x += e`, or `x = x.max(e)`, ..) and store it \
             back after the loop. {keyed}",
            part.to_token_stream()
                .to_string()
                .replace(" . ", ".")
                .replace("* ", "*")
        ),
    }
}

/// Finds `break`, `return`, `?` and labels that leave the body. Nested closures, async
/// blocks and items have their own control flow and are not looked into.
struct ControlFlow<'a> {
    kind: LoopKind,
    loop_depth: usize,
    labels: Vec<String>,
    errors: &'a mut Vec<Error>,
}

impl ControlFlow<'_> {
    fn in_loop(&mut self, label: Option<&Lifetime>, f: impl FnOnce(&mut Self)) {
        self.loop_depth += 1;
        self.labelled(label, f);
        self.loop_depth -= 1;
    }

    fn labelled(&mut self, label: Option<&Lifetime>, f: impl FnOnce(&mut Self)) {
        if let Some(label) = label {
            self.labels.push(label.ident.to_string());
        }
        f(self);
        if label.is_some() {
            self.labels.pop();
        }
    }

    fn check_label(&mut self, keyword: &str, label: Option<&Lifetime>) {
        if let Some(label) = label {
            if !self.labels.contains(&label.ident.to_string()) {
                self.errors.push(Error::new_spanned(
                    label,
                    format!(
                        "cannot `{keyword}` to the label `{label}` from the body of `{}`: \
                         the label is outside the loop body, which runs on its own for every \
                         {}",
                        self.kind.macro_name(),
                        self.kind.unit()
                    ),
                ));
            }
        }
    }

    fn leaves_body(&mut self, tokens: &dyn quote::ToTokens, keyword: &str) {
        let (unit, article) = match self.kind {
            LoopKind::Async => ("index", "an"),
            LoopKind::Sync => ("mini-batch", "a"),
        };
        self.errors.push(Error::new_spanned(
            tokens,
            format!(
                "`{keyword}` is not supported in the body of `{}`: the loop body runs for every \
                 {unit}; skip the rest of {article} {unit} with `continue`",
                self.kind.macro_name(),
            ),
        ));
    }
}

impl<'ast> Visit<'ast> for ControlFlow<'_> {
    fn visit_expr_for_loop(&mut self, e: &'ast syn::ExprForLoop) {
        self.visit_expr(&e.expr);
        self.in_loop(e.label.as_ref().map(|l| &l.name), |c| {
            c.visit_block(&e.body);
        });
    }

    fn visit_expr_while(&mut self, e: &'ast syn::ExprWhile) {
        self.in_loop(e.label.as_ref().map(|l| &l.name), |c| {
            c.visit_expr(&e.cond);
            c.visit_block(&e.body);
        });
    }

    fn visit_expr_loop(&mut self, e: &'ast syn::ExprLoop) {
        self.in_loop(e.label.as_ref().map(|l| &l.name), |c| {
            c.visit_block(&e.body);
        });
    }

    fn visit_expr_block(&mut self, e: &'ast syn::ExprBlock) {
        self.labelled(e.label.as_ref().map(|l| &l.name), |c| {
            c.visit_block(&e.block);
        });
    }

    fn visit_expr_break(&mut self, e: &'ast syn::ExprBreak) {
        match &e.label {
            Some(label) => self.check_label("break", Some(label)),
            None if self.loop_depth == 0 => self.leaves_body(e, "break"),
            None => {}
        }
        visit::visit_expr_break(self, e);
    }

    fn visit_expr_continue(&mut self, e: &'ast syn::ExprContinue) {
        self.check_label("continue", e.label.as_ref());
    }

    fn visit_expr_return(&mut self, e: &'ast syn::ExprReturn) {
        self.leaves_body(e, "return");
        visit::visit_expr_return(self, e);
    }

    fn visit_expr_try(&mut self, e: &'ast syn::ExprTry) {
        self.errors.push(Error::new(
            e.question_token.span,
            format!(
                "the `?` operator is not supported in the body of `{}`: the loop body cannot \
                 return an error; handle the error inside the body, e.g. with `match`, or \
                 panic with a message",
                self.kind.macro_name()
            ),
        ));
        visit::visit_expr_try(self, e);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        match MacroArgs::parse(mac) {
            MacroArgs::Exprs { exprs, .. } => exprs.iter().for_each(|e| self.visit_expr(e)),
            MacroArgs::Repeat(elem, len) => {
                self.visit_expr(&elem);
                self.visit_expr(&len);
            }
            MacroArgs::Matches(expr, _, guard) => {
                self.visit_expr(&expr);
                if let Some(guard) = &guard {
                    self.visit_expr(guard);
                }
            }
            MacroArgs::Stmts(stmts) => stmts.iter().for_each(|s| self.visit_stmt(s)),
            MacroArgs::Opaque => {}
        }
    }

    fn visit_expr_closure(&mut self, _: &'ast syn::ExprClosure) {}

    fn visit_expr_async(&mut self, _: &'ast syn::ExprAsync) {}

    fn visit_expr_try_block(&mut self, _: &'ast syn::ExprTryBlock) {}

    fn visit_expr_const(&mut self, _: &'ast syn::ExprConst) {}

    fn visit_item(&mut self, _: &'ast syn::Item) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::captures::analyze;
    use proc_macro2::TokenStream;
    use quote::quote;

    fn errors(kind: LoopKind, tokens: TokenStream) -> Vec<String> {
        let input = Input::parse(kind, tokens).expect("valid arguments");
        let analysis = analyze(&input.body.param, &input.body.body);
        match check(&input, &analysis) {
            Ok(_) => Vec::new(),
            Err(e) => e.into_iter().map(|e| e.to_string()).collect(),
        }
    }

    /// The reductions of an accepted body, as `name: form`.
    fn reductions(kind: LoopKind, tokens: TokenStream) -> Vec<String> {
        let input = Input::parse(kind, tokens).expect("valid arguments");
        let analysis = analyze(&input.body.param, &input.body.body);
        match check(&input, &analysis) {
            Ok(found) => found
                .iter()
                .map(|r| format!("{}: {}", r.name, r.form.describe(&r.name)))
                .collect(),
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn sgdmf_body_is_accepted() {
        let found = errors(
            LoopKind::Async,
            quote!(0..n, |k| {
                let r = &ratings[k];
                let (u, v) = (r.user as usize, r.item as usize);
                let wu = &mut w[u];
                let hv = &mut h[v];
                let mut err = r.rating;
                for f in 0..RANK {
                    err -= wu[f] * hv[f];
                }
                for f in 0..RANK {
                    let (a, b) = (wu[f], hv[f]);
                    wu[f] += gamma * (err * b - lambda * a);
                    hv[f] += gamma * (err * a - lambda * b);
                }
            }),
        );
        assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn assignment_to_capture() {
        let found = errors(
            LoopKind::Async,
            quote!(0..n, |k| {
                gamma = 0.1;
                gamma *= 0.5;
                cfg.lr = 1.0;
                cfg.n += 1;
                *total += 1;
                w[k] = 1.0;
                w[k][0] += 1.0;
                let mut s = 0.0;
                s += 1.0;
            }),
        );
        assert_eq!(found.len(), 4, "{found:?}");
        assert_eq!(
            found[0],
            "cannot assign to captured variable `gamma` inside `async_for!`: the loop body \
             runs on many threads and ranks, each with its own copy of plain captured values, \
             so the change would be lost. To accumulate across indices, write a reduction \
             (`gamma += e`, also `-=`, `*=`, `|=`, `&=`, `^=`; or `gamma = gamma.max(e)`, \
             `gamma = f(gamma, e)`): each worker's part is combined into `gamma` after the \
             loop. To keep a value per key (per user, per word), use a DVector with one \
             element per key and write it through indexing (`counts[w] += 1`); a single \
             total that every index writes belongs in a reduction, not a one-element \
             DVector, which would make the indices wait for each other."
        );
        assert!(found[1].starts_with("cannot assign to a part of captured variable `cfg`"));
        assert!(found[1].contains("(`let mut x = cfg.lr;`)"), "{found:?}");
        assert!(found[2].starts_with("cannot assign to a part of captured variable `cfg`"));
        assert!(found[3].starts_with("cannot assign to a part of captured variable `total`"));

        let found = errors(
            LoopKind::Sync,
            quote!(d, 8, m, |b| {
                total = b.len();
            }),
        );
        assert_eq!(found.len(), 1);
        assert!(found[0].contains("`total` inside `sync_for!`"), "{found:?}");
        assert!(found[0].contains("across mini-batches"), "{found:?}");
    }

    /// A reduction read outside its own accumulation is refused, once per variable, at
    /// the read; its own operand in `x = x + e`, `x = x.max(e)` or `x = f(e, x)` is no
    /// read, and a reduction read after the loop is none of the body's business.
    #[test]
    fn reading_a_reduction_in_the_body_is_refused() {
        let found = errors(
            LoopKind::Async,
            quote!(0..n, |k| {
                c += 1.0;
                u[k] += c * x[k];
                u[k] -= c;
                total = total + x[k];
                top = top.max(x[k]);
                worst = cmp::min(x[k], worst);
                steps += 1;
                if steps > 10 {
                    v[k] = 0.0;
                }
                println!("{loss}");
                loss += loss * 0.5;
            }),
        );
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(
            found[0].starts_with("captured variable `c` is accumulated inside `async_for!`"),
            "{found:?}"
        );
        assert!(found[0].contains("`epoch * n + k + 1`"), "{found:?}");
        assert!(
            found[1].starts_with("captured variable `steps`"),
            "{found:?}"
        );
        assert!(
            found[2].starts_with("captured variable `loss`"),
            "{found:?}"
        );

        let found = errors(
            LoopKind::Sync,
            quote!(d, 8, m, |b| {
                for x in b {
                    seen += 1;
                    w[0] += x / seen as f32;
                }
            }),
        );
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("inside `sync_for!`"), "{found:?}");
        assert!(
            found[0].contains("a position stored with each example"),
            "{found:?}"
        );
    }

    #[test]
    fn reduction_forms() {
        let found = reductions(
            LoopKind::Async,
            quote!(0..n, |k| {
                loss += e(k);
                loss -= 1.0;
                count = count + 1;
                prod *= 2.0;
                any |= k > 3;
                all &= k < 9;
                flip ^= true;
                top = top.max(x[k]);
                low = (low).min(x[k]);
                best = better(best, (s, k));
                worst = cmp::min(x[k], worst);
                let mut f = || seen += 1;
                f();
            }),
        );
        assert_eq!(
            found,
            [
                "loss: `loss += ..`",
                "count: `count += ..`",
                "prod: `prod *= ..`",
                "any: `any |= ..`",
                "all: `all &= ..`",
                "flip: `flip ^= ..`",
                "top: `top = top.max(..)`",
                "low: `low = low.min(..)`",
                "best: `best = better(best, ..)`",
                "worst: `worst = cmp :: min(.., worst)`",
                "seen: `seen += ..`",
            ]
        );
    }

    #[test]
    fn a_variable_accumulated_two_ways_is_refused() {
        let found = errors(
            LoopKind::Async,
            quote!(0..n, |k| {
                x += 1.0;
                x = x.max(2.0);
                y = f(y, 1);
                y = g(y, 1);
                z = f(z, z);
            }),
        );
        assert_eq!(found.len(), 3, "{found:?}");
        assert_eq!(
            found[0],
            "captured variable `x` is accumulated in two ways inside `async_for!`, `x += ..` \
             and `x = x.max(..)`: a reduction variable is combined across workers one way; \
             use one form, or two variables"
        );
        assert!(
            found[1].contains("`y = f(y, ..)` and `y = g(y, ..)`"),
            "{found:?}"
        );
        assert!(found[2].starts_with("cannot assign to captured variable `z`"));
    }

    #[test]
    fn top_level_break_and_return() {
        let found = errors(
            LoopKind::Async,
            quote!(0..n, |k| {
                if k == 0 {
                    continue;
                }
                if k == 1 {
                    break;
                }
                if k == 2 {
                    return;
                }
                for i in 0..k {
                    if i == 3 {
                        break;
                    }
                }
                loop {
                    break;
                }
                let f = || {
                    return 1;
                };
                while k > 9 {
                    return;
                }
            }),
        );
        assert_eq!(found.len(), 3, "{found:?}");
        assert_eq!(
            found[0],
            "`break` is not supported in the body of `async_for!`: the loop body runs for \
             every index; skip the rest of an index with `continue`"
        );
        assert!(found[1].starts_with("`return` is not supported"));
        assert!(found[2].starts_with("`return` is not supported"));

        let found = errors(
            LoopKind::Sync,
            quote!(d, 8, m, |b| {
                break;
            }),
        );
        assert!(found[0].contains("every mini-batch; skip the rest of a mini-batch"));
    }

    #[test]
    fn question_mark() {
        let found = errors(
            LoopKind::Async,
            quote!(0..n, |k| {
                let x = parse(k)?;
                let y = || -> Result<u8, E> { Ok(parse(k)?) };
                let z = async { fetch(k)? };
                assert!(check(k)?);
            }),
        );
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(
            found[0],
            "the `?` operator is not supported in the body of `async_for!`: the loop body \
             cannot return an error; handle the error inside the body, e.g. with `match`, or \
             panic with a message"
        );
    }

    #[test]
    fn labels_outside_the_body() {
        let found = errors(
            LoopKind::Async,
            quote!(0..n, |k| {
                'inner: for i in 0..k {
                    if i > 2 {
                        continue 'inner;
                    }
                    break 'inner;
                }
                'blk: {
                    if k > 1 {
                        break 'blk;
                    }
                }
                if k > 5 {
                    continue 'epochs;
                }
                break 'epochs;
            }),
        );
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].contains("cannot `continue` to the label `'epochs`"));
        assert!(found[1].contains("cannot `break` to the label `'epochs`"));
    }

    #[test]
    fn self_is_refused_once() {
        let found = errors(
            LoopKind::Async,
            quote!(0..n, |k| {
                w[k] = self.a + self.b;
            }),
        );
        assert_eq!(
            found,
            [
                "`self` cannot be captured by a loop body; bind the field you need to a local \
              variable before the loop"
            ]
        );
    }

    #[test]
    fn all_errors_are_reported_together() {
        let found = errors(
            LoopKind::Async,
            quote!(0..n, |k| {
                g = 1;
                let v = f(k)?;
                return;
                self.x;
            }),
        );
        assert_eq!(found.len(), 4, "{found:?}");
    }
}
