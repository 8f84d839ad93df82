//! Finding the free variables of a loop body.
//!
//! The analysis is syntactic: a `syn::visit` walk with a stack of scopes. A name is a
//! capture when it is used as a single-segment path, is not bound by a `let`, a pattern,
//! a closure parameter or a nested item of the body, is not the loop parameter, and does
//! not look like a type, constant or variant (`CamelCase` / `SCREAMING_CASE`). Callees of
//! plain calls (`foo(x)`), macro names and `::` paths are never captures.

use std::collections::HashSet;

use proc_macro2::Span;
use quote::ToTokens;
use syn::ext::IdentExt;
use syn::parse::{ParseStream, Parser};
use syn::punctuated::Punctuated;
use syn::visit::{self, Visit};
use syn::{BinOp, Block, Expr, ExprLit, Ident, Item, Lit, Macro, Pat, Stmt, Token, UseTree};

/// What the walk over a loop body found.
pub(crate) struct Analysis {
    /// The captured variables in order of first appearance, each with the span of its
    /// first use.
    pub captures: Vec<Ident>,
    /// Assignments whose target is a captured variable or a field of one
    /// (`gamma = ..`, `gamma += ..`, `cfg.lr = ..`).
    pub assignments: Vec<Assignment>,
    /// Uses of `self`.
    pub self_uses: Vec<Span>,
    /// Captured variables written through indexing (`x[i] op= e`, `x[i][j] = e`), each
    /// with whether every such write is a sum (`+=` or `-=`): a DDS, or a plain array or
    /// `Vec` accumulated element-wise.
    pub indexed: Vec<(Ident, bool)>,
    /// Every use of a captured variable's value, at its span, except the variable's own
    /// places in an accumulation (`x` in `x += e`, both `x`s in `x = x.max(e)`): a
    /// reduction read anywhere else is read as its group's partial.
    pub reads: Vec<Ident>,
}

/// An assignment to a captured variable.
pub(crate) struct Assignment {
    /// The captured variable.
    pub name: Ident,
    /// The assigned place, for the error span.
    pub target: Expr,
    /// The whole assignment, for the error span.
    pub whole: Expr,
    /// Which reduction the assignment is, if it is one.
    pub form: Form,
}

/// How an assignment to a captured variable accumulates into it.
#[derive(Clone)]
pub(crate) enum Form {
    /// `x op= e`, or `x = x op e`.
    Op(OpKind),
    /// `x = x.m(e)`: partials combine by the method `m` (`min`, `max`, ...).
    Method(Ident),
    /// `x = f(x, e)` (`first`) or `x = f(e, x)`: partials combine by `f`.
    Call { func: Expr, first: bool },
    /// Anything else (`x = e`, a field, a dereference): not a reduction.
    Other,
}

/// The operator of a reduction by compound assignment.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum OpKind {
    /// `+=` and `-=`.
    Sum,
    /// `*=`.
    Product,
    /// `|=`.
    Or,
    /// `&=`.
    And,
    /// `^=`.
    Xor,
}

impl OpKind {
    /// The reduction kind of a compound assignment operator (`+=`), or of the matching
    /// binary operator (`+`) in `x = x + e`.
    fn of(op: &BinOp) -> Option<OpKind> {
        Some(match op {
            BinOp::AddAssign(_) | BinOp::SubAssign(_) | BinOp::Add(_) | BinOp::Sub(_) => {
                OpKind::Sum
            }
            BinOp::MulAssign(_) | BinOp::Mul(_) => OpKind::Product,
            BinOp::BitOrAssign(_) | BinOp::BitOr(_) => OpKind::Or,
            BinOp::BitAndAssign(_) | BinOp::BitAnd(_) => OpKind::And,
            BinOp::BitXorAssign(_) | BinOp::BitXor(_) => OpKind::Xor,
            _ => return None,
        })
    }

    /// How the user writes it, for messages.
    pub(crate) fn spelling(self) -> &'static str {
        match self {
            OpKind::Sum => "+=",
            OpKind::Product => "*=",
            OpKind::Or => "|=",
            OpKind::And => "&=",
            OpKind::Xor => "^=",
        }
    }
}

impl Form {
    /// Whether two assignments accumulate the same way (one variable, one reduction).
    pub(crate) fn same_as(&self, other: &Form) -> bool {
        match (self, other) {
            (Form::Op(a), Form::Op(b)) => a == b,
            (Form::Method(a), Form::Method(b)) => a == b,
            (Form::Call { func: f, first: a }, Form::Call { func: g, first: b }) => {
                a == b && f.to_token_stream().to_string() == g.to_token_stream().to_string()
            }
            _ => false,
        }
    }

    /// How the user writes it, for messages.
    pub(crate) fn describe(&self, name: &str) -> String {
        match self {
            Form::Op(op) => format!("`{name} {} ..`", op.spelling()),
            Form::Method(m) => format!("`{name} = {name}.{m}(..)`"),
            Form::Call { func, first: true } => {
                format!("`{name} = {}({name}, ..)`", func.to_token_stream())
            }
            Form::Call { func, first: false } => {
                format!("`{name} = {}(.., {name})`", func.to_token_stream())
            }
            Form::Other => format!("`{name} = ..`"),
        }
    }
}

/// `true` when `expr` is the plain variable `name`.
fn is_var(expr: &Expr, name: &str) -> bool {
    match expr {
        Expr::Path(p) => simple_name(p).is_some_and(|i| i.unraw() == name),
        Expr::Paren(p) => is_var(&p.expr, name),
        _ => false,
    }
}

/// The reduction form of `name = value`.
fn form_of_assignment(name: &str, value: &Expr) -> Form {
    match value {
        Expr::Paren(p) => form_of_assignment(name, &p.expr),
        Expr::Binary(b) if is_var(&b.left, name) => OpKind::of(&b.op).map_or(Form::Other, Form::Op),
        Expr::MethodCall(m) if m.args.len() == 1 && is_var(&m.receiver, name) => {
            Form::Method(m.method.clone())
        }
        Expr::Call(c) if c.args.len() == 2 && matches!(&*c.func, Expr::Path(_)) => {
            match (is_var(&c.args[0], name), is_var(&c.args[1], name)) {
                (true, false) => Form::Call {
                    func: (*c.func).clone(),
                    first: true,
                },
                (false, true) => Form::Call {
                    func: (*c.func).clone(),
                    first: false,
                },
                _ => Form::Other,
            }
        }
        _ => Form::Other,
    }
}

/// Analyses `body`, with `param` (the loop parameter's pattern) bound around it.
pub(crate) fn analyze(param: &Pat, body: &Expr) -> Analysis {
    let mut walker = Walker {
        scopes: vec![HashSet::new()],
        seen: HashSet::new(),
        analysis: Analysis {
            captures: Vec::new(),
            assignments: Vec::new(),
            self_uses: Vec::new(),
            indexed: Vec::new(),
            reads: Vec::new(),
        },
        accumulating: HashSet::new(),
    };
    walker.bind_pat(param);
    walker.visit_expr(body);
    walker.analysis
}

/// `true` for names that follow the conventions of types, constants, statics and
/// variants (`Rating`, `RANK`, `None`), which are never captured.
fn is_type_or_const_like(name: &str) -> bool {
    name.trim_start_matches('_')
        .chars()
        .next()
        .is_some_and(char::is_uppercase)
}

struct Walker {
    scopes: Vec<HashSet<String>>,
    seen: HashSet<String>,
    analysis: Analysis,
    /// The paths (by address in the body's syntax tree) that name a variable in its own
    /// accumulation, which are no reads of it.
    accumulating: HashSet<usize>,
}

/// The plain variable path `expr` is (through parentheses), if it is one.
fn var_path(expr: &Expr) -> Option<&syn::ExprPath> {
    match expr {
        Expr::Path(p) => simple_name(p).is_some().then_some(p),
        Expr::Paren(p) => var_path(&p.expr),
        _ => None,
    }
}

/// In `name = value` accumulating into `name` (see [`form_of_assignment`]), the path that
/// names `name` as the accumulation's own operand.
fn own_operand<'a>(name: &str, value: &'a Expr) -> Option<&'a syn::ExprPath> {
    let own = |e: &'a Expr| var_path(e).filter(|_| is_var(e, name));
    match value {
        Expr::Paren(p) => own_operand(name, &p.expr),
        Expr::Binary(b) => own(&b.left),
        Expr::MethodCall(m) if m.args.len() == 1 => own(&m.receiver),
        Expr::Call(c) if c.args.len() == 2 => own(&c.args[0]).or_else(|| own(&c.args[1])),
        _ => None,
    }
}

impl Walker {
    fn bind(&mut self, ident: &Ident) {
        self.scopes
            .last_mut()
            .expect("the outermost scope is never popped")
            .insert(ident.unraw().to_string());
    }

    fn is_bound(&self, name: &str) -> bool {
        self.scopes.iter().any(|scope| scope.contains(name))
    }

    fn scoped(&mut self, f: impl FnOnce(&mut Self)) {
        self.scopes.push(HashSet::new());
        f(self);
        self.scopes.pop();
    }

    /// Binds every name that `pat` binds in the innermost scope.
    fn bind_pat(&mut self, pat: &Pat) {
        match pat {
            Pat::Ident(p) => {
                self.bind(&p.ident);
                if let Some((_, sub)) = &p.subpat {
                    self.bind_pat(sub);
                }
            }
            Pat::Or(p) => p.cases.iter().for_each(|c| self.bind_pat(c)),
            Pat::Paren(p) => self.bind_pat(&p.pat),
            Pat::Reference(p) => self.bind_pat(&p.pat),
            Pat::Type(p) => self.bind_pat(&p.pat),
            Pat::Slice(p) => p.elems.iter().for_each(|e| self.bind_pat(e)),
            Pat::Tuple(p) => p.elems.iter().for_each(|e| self.bind_pat(e)),
            Pat::TupleStruct(p) => p.elems.iter().for_each(|e| self.bind_pat(e)),
            Pat::Struct(p) => p.fields.iter().for_each(|f| self.bind_pat(&f.pat)),
            _ => {}
        }
    }

    /// Binds the names that the items among `stmts` define; items are visible in the
    /// whole block, also before their definition.
    fn bind_items(&mut self, stmts: &[Stmt]) {
        for stmt in stmts {
            if let Stmt::Item(item) = stmt {
                match item {
                    Item::Const(i) => self.bind(&i.ident),
                    Item::Enum(i) => self.bind(&i.ident),
                    Item::Fn(i) => self.bind(&i.sig.ident),
                    Item::Mod(i) => self.bind(&i.ident),
                    Item::Static(i) => self.bind(&i.ident),
                    Item::Struct(i) => self.bind(&i.ident),
                    Item::Trait(i) => self.bind(&i.ident),
                    Item::Type(i) => self.bind(&i.ident),
                    Item::Union(i) => self.bind(&i.ident),
                    Item::Macro(i) => {
                        if let Some(ident) = &i.ident {
                            self.bind(ident);
                        }
                    }
                    Item::Use(i) => self.bind_use(&i.tree, None),
                    _ => {}
                }
            }
        }
    }

    fn bind_use(&mut self, tree: &UseTree, parent: Option<&Ident>) {
        match tree {
            UseTree::Path(p) => self.bind_use(&p.tree, Some(&p.ident)),
            UseTree::Name(n) if n.ident == "self" => {
                if let Some(parent) = parent {
                    self.bind(parent);
                }
            }
            UseTree::Name(n) => self.bind(&n.ident),
            UseTree::Rename(r) => self.bind(&r.rename),
            UseTree::Group(g) => g.items.iter().for_each(|t| self.bind_use(t, parent)),
            UseTree::Glob(_) => {}
        }
    }

    /// A use of the plain name `ident` as a value (`read`: not as its own operand in an
    /// accumulation into it).
    fn use_name(&mut self, ident: &Ident, read: bool) {
        let name = ident.unraw().to_string();
        if name == "self" {
            self.analysis.self_uses.push(ident.span());
            return;
        }
        if name == "Self" || is_type_or_const_like(&name) || self.is_bound(&name) {
            return;
        }
        if read {
            self.analysis.reads.push(ident.clone());
        }
        if self.seen.insert(name) {
            self.analysis.captures.push(ident.clone());
        }
    }

    /// Marks `path` as a variable's own operand in its accumulation.
    fn accumulating(&mut self, path: Option<&syn::ExprPath>) {
        if let Some(p) = path {
            self.accumulating.insert(p as *const syn::ExprPath as usize);
        }
    }

    /// Records an assignment to `target` when it is a captured variable or a field of
    /// one; writes through indexing (`w[i] = ..`) go to a DDS view and are fine.
    fn assign(&mut self, target: &Expr, whole: Expr, form: impl FnOnce(&str) -> Form) {
        let mut place = target;
        let mut indexed = false;
        let root = loop {
            match place {
                Expr::Field(f) => place = &f.base,
                Expr::Paren(p) => place = &p.expr,
                Expr::Unary(u) if matches!(u.op, syn::UnOp::Deref(_)) => place = &u.expr,
                Expr::Index(i) => {
                    indexed = true;
                    place = &i.expr;
                }
                Expr::Path(p) => break simple_name(p),
                _ => break None,
            }
        };
        let Some(root) = root else { return };
        let name = root.unraw().to_string();
        if name == "self" || is_type_or_const_like(&name) || self.is_bound(&name) {
            return;
        }
        if indexed {
            // A write through indexing goes to a DDS view, or accumulates into a plain
            // array element-wise (a sum only): which, the types decide.
            let sum =
                matches!(form(&name), Form::Op(OpKind::Sum)) && matches!(&whole, Expr::Binary(_));
            match self
                .analysis
                .indexed
                .iter_mut()
                .find(|(n, _)| n.unraw() == name)
            {
                Some((_, all_sums)) => *all_sums &= sum,
                None => self.analysis.indexed.push((root.clone(), sum)),
            }
            return;
        }
        // Only a plain variable can be a reduction: not a field of one, nor through `*`.
        let form = match target {
            Expr::Path(_) => form(&name),
            _ => Form::Other,
        };
        self.analysis.assignments.push(Assignment {
            name: root.clone(),
            target: target.clone(),
            whole,
            form,
        });
    }

    fn visit_macro_args(&mut self, args: &MacroArgs) {
        match args {
            MacroArgs::Exprs { exprs, format } => {
                // Named arguments of a format macro (`x = value`, also the fields of
                // logging macros): the name is not a variable, and a format string
                // that says `{x}` means the argument.
                let named: HashSet<String> = exprs
                    .iter()
                    .filter_map(|e| match e {
                        Expr::Assign(a) => match &*a.left {
                            Expr::Path(p) => simple_name(p).map(|n| n.unraw().to_string()),
                            _ => None,
                        },
                        _ => None,
                    })
                    .collect();
                for (i, expr) in exprs.iter().enumerate() {
                    match expr {
                        Expr::Assign(a) if matches!(&*a.left, Expr::Path(_)) => {
                            self.visit_expr(&a.right);
                        }
                        Expr::Lit(ExprLit {
                            lit: Lit::Str(lit), ..
                        }) if *format == Some(i) => {
                            for name in inline_format_args(&lit.value()) {
                                if !named.contains(&name) {
                                    self.use_name(&Ident::new(&name, lit.span()), true);
                                }
                            }
                        }
                        _ => self.visit_expr(expr),
                    }
                }
            }
            MacroArgs::Repeat(elem, len) => {
                self.visit_expr(elem);
                self.visit_expr(len);
            }
            MacroArgs::Matches(expr, pat, guard) => {
                self.visit_expr(expr);
                self.scoped(|w| {
                    w.bind_pat(pat);
                    if let Some(guard) = guard {
                        w.visit_expr(guard);
                    }
                });
            }
            MacroArgs::Stmts(stmts) => self.scoped(|w| {
                w.bind_items(stmts);
                for stmt in stmts {
                    w.visit_stmt(stmt);
                }
            }),
            MacroArgs::Opaque => {}
        }
    }
}

/// The name of a path that is a single plain identifier (`x`, not `a::x`, `x::<T>` or
/// `<T>::x`).
pub(crate) fn simple_name(path: &syn::ExprPath) -> Option<&Ident> {
    if path.qself.is_some() || path.path.leading_colon.is_some() {
        return None;
    }
    let segment = match path.path.segments.len() {
        1 => path.path.segments.first()?,
        _ => return None,
    };
    segment.arguments.is_none().then_some(&segment.ident)
}

impl<'ast> Visit<'ast> for Walker {
    fn visit_block(&mut self, block: &'ast Block) {
        self.scoped(|w| {
            w.bind_items(&block.stmts);
            block.stmts.iter().for_each(|s| w.visit_stmt(s));
        });
    }

    fn visit_local(&mut self, local: &'ast syn::Local) {
        if let Some(init) = &local.init {
            self.visit_expr(&init.expr);
            if let Some((_, diverge)) = &init.diverge {
                self.visit_expr(diverge);
            }
        }
        self.bind_pat(&local.pat);
    }

    fn visit_expr_closure(&mut self, closure: &'ast syn::ExprClosure) {
        self.scoped(|w| {
            closure.inputs.iter().for_each(|p| w.bind_pat(p));
            w.visit_expr(&closure.body);
        });
    }

    fn visit_expr_for_loop(&mut self, e: &'ast syn::ExprForLoop) {
        self.visit_expr(&e.expr);
        self.scoped(|w| {
            w.bind_pat(&e.pat);
            w.visit_block(&e.body);
        });
    }

    fn visit_expr_match(&mut self, e: &'ast syn::ExprMatch) {
        self.visit_expr(&e.expr);
        for arm in &e.arms {
            self.scoped(|w| {
                w.bind_pat(&arm.pat);
                if let Some((_, guard)) = &arm.guard {
                    w.visit_expr(guard);
                }
                w.visit_expr(&arm.body);
            });
        }
    }

    fn visit_expr_if(&mut self, e: &'ast syn::ExprIf) {
        // `if let` bindings are visible in the condition's later parts and the then
        // branch, not in the else branch.
        self.scoped(|w| {
            w.visit_expr(&e.cond);
            w.visit_block(&e.then_branch);
        });
        if let Some((_, else_branch)) = &e.else_branch {
            self.visit_expr(else_branch);
        }
    }

    fn visit_expr_while(&mut self, e: &'ast syn::ExprWhile) {
        self.scoped(|w| {
            w.visit_expr(&e.cond);
            w.visit_block(&e.body);
        });
    }

    fn visit_expr_let(&mut self, e: &'ast syn::ExprLet) {
        self.visit_expr(&e.expr);
        self.bind_pat(&e.pat);
    }

    fn visit_expr_path(&mut self, e: &'ast syn::ExprPath) {
        if let Some(ident) = simple_name(e) {
            let own = self
                .accumulating
                .contains(&(e as *const syn::ExprPath as usize));
            self.use_name(ident, !own);
        }
    }

    fn visit_expr_call(&mut self, e: &'ast syn::ExprCall) {
        let plain_callee = matches!(&*e.func, Expr::Path(p) if simple_name(p).is_some());
        if !plain_callee {
            self.visit_expr(&e.func);
        }
        e.args.iter().for_each(|a| self.visit_expr(a));
    }

    fn visit_expr_assign(&mut self, e: &'ast syn::ExprAssign) {
        self.assign(&e.left, Expr::Assign(e.clone()), |name| {
            form_of_assignment(name, &e.right)
        });
        if let Some(target) = var_path(&e.left) {
            let name = simple_name(target).map(|i| i.unraw().to_string());
            let name = name.unwrap_or_default();
            if !matches!(form_of_assignment(&name, &e.right), Form::Other) {
                self.accumulating(Some(target));
                self.accumulating(own_operand(&name, &e.right));
            }
        }
        visit::visit_expr_assign(self, e);
    }

    fn visit_expr_binary(&mut self, e: &'ast syn::ExprBinary) {
        if is_compound_assignment(&e.op) {
            self.assign(&e.left, Expr::Binary(e.clone()), |_| {
                OpKind::of(&e.op).map_or(Form::Other, Form::Op)
            });
            self.accumulating(var_path(&e.left));
        }
        visit::visit_expr_binary(self, e);
    }

    fn visit_macro(&mut self, mac: &'ast Macro) {
        let args = MacroArgs::parse(mac);
        self.visit_macro_args(&args);
    }

    // Items cannot capture the body's variables; their names are bound by `bind_items`.
    fn visit_item(&mut self, _: &'ast Item) {}

    // `const { .. }` blocks cannot use local variables.
    fn visit_expr_const(&mut self, _: &'ast syn::ExprConst) {}

    // Types hold no variables.
    fn visit_type(&mut self, _: &'ast syn::Type) {}

    // Pattern bindings are handled by `bind_pat`; paths in patterns are constants.
    fn visit_pat(&mut self, _: &'ast Pat) {}

    fn visit_attribute(&mut self, _: &'ast syn::Attribute) {}
}

pub(crate) fn is_compound_assignment(op: &BinOp) -> bool {
    matches!(
        op,
        BinOp::AddAssign(_)
            | BinOp::SubAssign(_)
            | BinOp::MulAssign(_)
            | BinOp::DivAssign(_)
            | BinOp::RemAssign(_)
            | BinOp::BitXorAssign(_)
            | BinOp::BitAndAssign(_)
            | BinOp::BitOrAssign(_)
            | BinOp::ShlAssign(_)
            | BinOp::ShrAssign(_)
    )
}

/// The arguments of a macro invocation in the body, parsed as far as they can be.
pub(crate) enum MacroArgs {
    /// Comma-separated expressions; `format` is the position of the format string of a
    /// formatting macro.
    Exprs {
        exprs: Vec<Expr>,
        format: Option<usize>,
    },
    /// `vec![elem; len]`.
    Repeat(Expr, Expr),
    /// `matches!(expr, pat)` or `matches!(expr, pat if guard)`.
    Matches(Expr, Pat, Option<Expr>),
    /// Statements, e.g. the contents of a macro that takes a block.
    Stmts(Vec<Stmt>),
    /// Tokens that are none of these; they are not looked into.
    Opaque,
}

/// Macros whose arguments are not code.
const OPAQUE_MACROS: &[&str] = &[
    "stringify",
    "concat",
    "concat_idents",
    "include",
    "include_str",
    "include_bytes",
    "env",
    "option_env",
    "cfg",
    "line",
    "column",
    "file",
    "module_path",
    "compile_error",
];

/// Macros whose first string literal argument is a format string.
const FORMAT_MACROS: &[&str] = &[
    "print",
    "println",
    "eprint",
    "eprintln",
    "format",
    "format_args",
    "write",
    "writeln",
    "panic",
    "assert",
    "assert_eq",
    "assert_ne",
    "debug_assert",
    "debug_assert_eq",
    "debug_assert_ne",
    "unreachable",
    "todo",
    "unimplemented",
    "trace",
    "debug",
    "info",
    "warn",
    "error",
    "anyhow",
    "bail",
    "ensure",
];

impl MacroArgs {
    pub(crate) fn parse(mac: &Macro) -> MacroArgs {
        let Some(name) = mac.path.segments.last().map(|s| s.ident.to_string()) else {
            return MacroArgs::Opaque;
        };
        if OPAQUE_MACROS.contains(&name.as_str()) {
            return MacroArgs::Opaque;
        }
        let tokens = mac.tokens.clone();
        if name == "matches" {
            if let Ok(args) = parse_matches.parse2(tokens.clone()) {
                return args;
            }
        }
        if let Ok(exprs) = Punctuated::<Expr, Token![,]>::parse_terminated.parse2(tokens.clone()) {
            let exprs: Vec<Expr> = exprs.into_iter().collect();
            let format = if FORMAT_MACROS.contains(&name.as_str()) {
                exprs.iter().position(|e| {
                    matches!(
                        e,
                        Expr::Lit(ExprLit {
                            lit: Lit::Str(_),
                            ..
                        })
                    )
                })
            } else {
                None
            };
            return MacroArgs::Exprs { exprs, format };
        }
        if let Ok(args) = parse_repeat.parse2(tokens.clone()) {
            return args;
        }
        if let Ok(stmts) = Block::parse_within.parse2(tokens) {
            return MacroArgs::Stmts(stmts);
        }
        MacroArgs::Opaque
    }
}

fn parse_matches(input: ParseStream) -> syn::Result<MacroArgs> {
    let expr: Expr = input.parse()?;
    input.parse::<Token![,]>()?;
    let pat = Pat::parse_multi_with_leading_vert(input)?;
    let guard = if input.peek(Token![if]) {
        input.parse::<Token![if]>()?;
        Some(input.parse()?)
    } else {
        None
    };
    if input.peek(Token![,]) {
        input.parse::<Token![,]>()?;
    }
    Ok(MacroArgs::Matches(expr, pat, guard))
}

fn parse_repeat(input: ParseStream) -> syn::Result<MacroArgs> {
    let elem: Expr = input.parse()?;
    input.parse::<Token![;]>()?;
    let len: Expr = input.parse()?;
    Ok(MacroArgs::Repeat(elem, len))
}

/// The variables a format string names inline: `{name}`, `{name:?}`, and `name$` widths
/// and precisions (`{:>width$.prec$}`).
fn inline_format_args(format: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = format;
    while let Some(open) = rest.find(['{', '}']) {
        let after = &rest[open + 1..];
        if rest[open..].starts_with('}') {
            // `}}` is an escaped brace; a lone `}` is rustc's error to report.
            rest = after.strip_prefix('}').unwrap_or(after);
            continue;
        }
        if let Some(escaped) = after.strip_prefix('{') {
            rest = escaped;
            continue;
        }
        let Some(close) = after.find('}') else { break };
        let spec = &after[..close];
        rest = &after[close + 1..];
        let (arg, options) = spec.split_once(':').unwrap_or((spec, ""));
        let arg = arg.trim();
        if is_plain_identifier(arg) {
            names.push(arg.to_string());
        }
        for (i, _) in options.match_indices('$') {
            let before = &options[..i];
            let start = before
                .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .map_or(0, |p| p + 1);
            let name = &before[start..];
            if is_plain_identifier(name) {
                names.push(name.to_string());
            }
        }
    }
    names
}

/// An ASCII identifier that is not a number, `_`, or a keyword a format string would not
/// name.
fn is_plain_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    let Some(first) = chars.next() else {
        return false;
    };
    (first.is_ascii_alphabetic() || first == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && s != "_"
        && syn::parse_str::<Ident>(s).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proc_macro2::TokenStream;
    use quote::quote;

    /// The names of the captures, in order.
    fn capture_names(analysis: &Analysis) -> Vec<String> {
        analysis
            .captures
            .iter()
            .map(|c| c.unraw().to_string())
            .collect()
    }

    /// Parses `|param| body` for tests.
    fn analyze_closure(tokens: TokenStream) -> Analysis {
        let closure: syn::ExprClosure = syn::parse2(tokens).expect("a closure");
        let param = closure.inputs.first().expect("one parameter");
        analyze(param, &closure.body)
    }

    fn names(tokens: TokenStream) -> Vec<String> {
        capture_names(&analyze_closure(tokens))
    }

    #[test]
    fn sgdmf_body() {
        let found = names(quote! {
            |k| {
                let r = &ratings[k];
                let (u, v) = (r.user as usize, r.item as usize);
                let wu = &mut w[u];
                let hv = &mut h[v];
                let mut err = r.rating;
                for f in 0..RANK { err -= wu[f] * hv[f]; }
                for f in 0..RANK {
                    let (a, b) = (wu[f], hv[f]);
                    wu[f] += gamma * (err * b - lambda * a);
                    hv[f] += gamma * (err * a - lambda * b);
                }
            }
        });
        assert_eq!(found, ["ratings", "w", "h", "gamma", "lambda"]);
        let analysis = analyze_closure(quote!(|k| {
            let r = &ratings[k];
            w[r.u] = 0.0;
        }));
        assert!(analysis.assignments.is_empty());
    }

    #[test]
    fn let_shadows_after_initialiser() {
        assert_eq!(
            names(quote!(|k| {
                let x = x + 1;
                y[k] = x;
            })),
            ["x", "y"]
        );
        assert_eq!(
            names(quote!(|k| {
                let y = 2;
                y + k
            })),
            Vec::<String>::new()
        );
        // The binding ends with its block.
        assert_eq!(
            names(quote!(|k| {
                {
                    let a = 1;
                }
                a
            })),
            ["a"]
        );
        // A use before the `let` refers to the outer variable.
        assert_eq!(
            names(quote!(|k| {
                f(a);
                let a = 1;
                a
            })),
            ["a"]
        );
    }

    #[test]
    fn first_use_order_and_span() {
        let analysis = analyze_closure(quote!(|k| { b + a + b + c.x }));
        assert_eq!(capture_names(&analysis), ["b", "a", "c"]);
    }

    #[test]
    fn loop_parameter_patterns() {
        assert_eq!(names(quote!(|k| w[k])), ["w"]);
        assert_eq!(names(quote!(|(i, j)| w[i] + h[j])), ["w", "h"]);
        assert_eq!(names(quote!(|k: usize| w[k])), ["w"]);
    }

    #[test]
    fn closure_parameters() {
        let found = names(quote!(|k| {
            let s: f32 = xs.iter().map(|x| x * scale).sum();
            let g = |a: f32, (b, c): (f32, f32)| a + b + c + bias;
            w[k] = g(s, (1.0, 2.0));
        }));
        assert_eq!(found, ["xs", "scale", "bias", "w"]);
    }

    #[test]
    fn match_arms_and_if_let() {
        let found = names(quote!(|k| {
            match table.get(k) {
                Some(v) if v > limit => out[k] = v,
                Some(Pair {
                    left,
                    right: r @ 0..=9,
                }) => out[k] = left + r,
                Some(ref z) | Other(z) => out[k] = *z,
                None => out[k] = fallback,
            }
            if let Some(q) = opt {
                out[k] = q;
            } else {
                out[k] = q;
            }
            while let Some(t) = it.next() {
                out[t] = 0;
            }
        }));
        assert_eq!(
            found,
            ["table", "limit", "out", "fallback", "opt", "q", "it"]
        );
    }

    #[test]
    fn for_loops_bind_their_pattern() {
        let found = names(quote!(|k| {
            for (i, x) in row.iter().enumerate() {
                acc[i] += x;
            }
            i
        }));
        assert_eq!(found, ["row", "acc", "i"]);
    }

    #[test]
    fn format_strings() {
        let found = names(quote!(|k| {
            println!(
                "{k} {alpha:?} {} {0} {{beta}} {:>width$.prec$}",
                gamma, delta
            );
            let local = 1;
            assert!(ok, "{local} {named}", named = value);
            format!("{epsilon}");
            write!(out, "{zeta}").unwrap();
        }));
        assert_eq!(
            found,
            ["alpha", "width", "prec", "gamma", "delta", "ok", "value", "epsilon", "out", "zeta"]
        );
    }

    #[test]
    fn macros_with_expressions() {
        let found = names(quote!(|k| {
            let v = vec![init; len];
            assert_eq!(v[k], expected, "at {}", k);
            debug_assert!(matches!(v[k], Some(x) if x > bound));
            my_macro!(a + b, c);
            stringify!(not_a_capture);
            other!(=> not parsed <=);
        }));
        assert_eq!(found, ["init", "len", "expected", "bound", "a", "b", "c"]);
    }

    #[test]
    fn non_captures() {
        let found = names(quote!(|k| {
            let r = Rating { user: 0, item: k };
            let n = RANK + Some(MAX_ITERS).unwrap() + std::f32::consts::PI as usize;
            let m = <Vec<f32>>::new();
            let z = Self::zero();
            let p = ::core::mem::size_of::<u8>() + foo::<u8>();
            xs[k] = helper(n, y) + T::default();
        }));
        assert_eq!(found, ["xs", "y"]);
    }

    #[test]
    fn callee_excluded_arguments_included() {
        assert_eq!(names(quote!(|k| foo(x, bar(y)))), ["x", "y"]);
        // A callee that is not a plain name is an expression like any other.
        assert_eq!(
            names(quote!(|k| (table.f)(k) + fs[k](z))),
            ["table", "fs", "z"]
        );
        assert_eq!(names(quote!(|k| v.method(arg))), ["v", "arg"]);
    }

    #[test]
    fn nested_items() {
        let found = names(quote!(|k| {
            let f = helper;
            fn helper(x: usize) -> usize {
                x + outer_is_not_visible
            }
            const limit: usize = 3;
            static counter: u8 = 0;
            use std::cmp::max as biggest;
            w[k] = f(limit) + biggest(1, 2) as usize + counter as usize;
        }));
        assert_eq!(found, ["w"]);
    }

    #[test]
    fn struct_literals_and_fields() {
        let found = names(quote!(|k| {
            let p = Point { x, y: yy, ..base };
            p.x + other.field.inner
        }));
        assert_eq!(found, ["x", "yy", "base", "other"]);
    }

    #[test]
    fn let_else_and_labels() {
        let found = names(quote!(|k| {
            let Some(v) = opt else {
                return_value = 1;
                continue;
            };
            'outer: for i in 0..n {
                if v == i {
                    break 'outer;
                }
            }
        }));
        assert_eq!(found, ["opt", "return_value", "n"]);
    }

    #[test]
    fn assignments_to_captures() {
        let a = analyze_closure(quote!(|k| {
            gamma = 0.5;
            gamma += 1.0;
            cfg.lr = 0.1;
            (cfg).x.y *= 2.0;
            w[k] = 1.0;
            w[k][0] += 1.0;
            let mut local = 0;
            local += 1;
            ok[k].field = 2;
            *ptr = 1;
            CONSTANT = 3;
        }));
        let assigned: Vec<String> = a.assignments.iter().map(|x| x.name.to_string()).collect();
        assert_eq!(assigned, ["gamma", "gamma", "cfg", "cfg", "ptr"]);
    }

    #[test]
    fn self_uses() {
        let a = analyze_closure(quote!(|k| {
            w[k] = self.rate + Self::X;
        }));
        assert_eq!(a.self_uses.len(), 1);
        assert_eq!(capture_names(&a), ["w"]);
    }

    #[test]
    fn raw_identifiers() {
        assert_eq!(names(quote!(|k| r#type[k])), ["type"]);
    }

    #[test]
    fn format_string_parser() {
        assert_eq!(
            inline_format_args("{a} {b:?} {c:>8.3} {:w$} {0} {} {{d}} }} {e:#x} {:.p$} {_x}"),
            ["a", "b", "c", "w", "e", "p", "_x"]
        );
        assert_eq!(inline_format_args("{:1$} {:.*} {"), Vec::<String>::new());
    }
}
