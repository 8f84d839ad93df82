//! Turning a checked loop into a named task and a call into the runtime.
//!
//! Everything generated goes through `KRATE::__private`, where `KRATE` is the path to the
//! strads-ap crate under the name the calling crate's `Cargo.toml` gives it (found by
//! `proc-macro-crate`, so a renamed dependency works). Generated local names use
//! `Span::mixed_site()` so the user's body cannot see them, and user tokens keep their
//! spans so that errors point at user code.

use proc_macro2::{Literal, Span, TokenStream};
use quote::{format_ident, quote, quote_spanned, ToTokens};
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::{Expr, Ident, Pat, Type};

use crate::ast::{Head, Input, LoopKind};
use crate::captures::{Form, OpKind};
use crate::valid::ReductionVar;
use crate::{captures, valid};

/// Parses, checks and expands one invocation of `async_for!` or `sync_for!`.
pub(crate) fn expand(kind: LoopKind, tokens: TokenStream) -> syn::Result<TokenStream> {
    expand_in(kind, tokens, crate_path())
}

/// [`expand`] with the path to the strads-ap crate given.
fn expand_in(kind: LoopKind, tokens: TokenStream, krate: Ident) -> syn::Result<TokenStream> {
    let input = Input::parse(kind, tokens)?;
    let analysis = captures::analyze(&input.body.param, &input.body.body);
    let reductions = valid::check(&input, &analysis)?;
    // Captures written through indexing by sums only: a DDS, or a plain array summed.
    let summed: Vec<String> = analysis
        .indexed
        .iter()
        .filter(|(_, sums)| *sums)
        .map(|(c, _)| c.unraw().to_string())
        .filter(|name| !reductions.iter().any(|r| &r.name == name))
        .collect();
    Ok(generate(
        &input,
        krate,
        &analysis.captures,
        &reductions,
        &summed,
    ))
}

/// The name of strads-ap in the crate being compiled: the name its `Cargo.toml` gives the
/// `strads-ap` dependency (`sap = { package = "strads-ap", .. }` gives `sap`), and
/// `strads_ap` when there is none to find (strads-ap's own tests, or a crate that reaches
/// strads-ap through another).
fn crate_path() -> Ident {
    use proc_macro_crate::{crate_name, FoundCrate};
    let name = match crate_name("strads-ap") {
        Ok(FoundCrate::Name(name)) => name,
        Ok(FoundCrate::Itself) | Err(_) => "strads_ap".to_string(),
    };
    Ident::new(&name, Span::call_site())
}

/// Like `syn::Error::into_compile_error`, but one expression: several `compile_error!`
/// invocations side by side are not an expression, so they go in a block.
pub(crate) fn into_compile_error(error: syn::Error) -> TokenStream {
    let errors = error.into_compile_error();
    quote!({ #errors })
}

/// 64-bit FNV-1a.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// A generated local name, invisible to the user's code.
fn local(name: &str) -> Ident {
    Ident::new(name, Span::mixed_site())
}

/// A span that resolves like generated code but is shown at the user's `span`.
fn at(span: Span) -> Span {
    Span::call_site().located_at(span)
}

fn generate(
    input: &Input,
    krate: Ident,
    captures: &[Ident],
    reductions: &[ReductionVar],
    summed: &[String],
) -> TokenStream {
    let gen = Generator::new(input, krate, captures, reductions, summed);
    let private = &gen.private;

    let body_hash = fnv1a(input.body.body.to_token_stream().to_string().as_bytes());
    let task_name = format!("__StradsTask_{body_hash:016x}");
    // Shown in type errors as `LoopTask<..>`; hygienic, so no user name can meet it.
    let task = local("LoopTask");
    let body_hash = Literal::u64_suffixed(body_hash);
    let site = local("__STRADS_SITE");
    let task_var = local("__strads_task");

    let names = &gen.names;
    let generics: Vec<Ident> = (0..captures.len())
        .map(|i| format_ident!("__C{}", i))
        .collect();
    let struct_def = if captures.is_empty() {
        quote!(struct #task {})
    } else {
        quote!(struct #task <#(#generics),*> { #(#captures: #generics),* })
    };
    let inits = captures
        .iter()
        .zip(&gen.names)
        .map(|(c, name)| match gen.reduction(name) {
            Some(r) => {
                let combine = combine_fn(r);
                let private = gen.private_at(at(r.span));
                quote_spanned!(at(r.span)=> #c: #private::reduction(&#c, #combine))
            }
            None if gen.is_summed(name) => {
                let private = gen.private_at(at(c.span()));
                quote_spanned! {at(c.span())=>
                    #c: {
                        #[allow(unused_imports)]
                        use #private::{CaptureDds as _, CaptureSummed as _};
                        (&&#private::Written(&#c)).__strads_capture_summed()
                    }
                }
            }
            None => {
                let private = gen.private_at(at(c.span()));
                quote_spanned!(at(c.span())=> #c: #private::capture(&#c))
            }
        });

    let (kind, run_fn, head, run, record, direct, window_lock) = match &input.head {
        Head::Async { range } => {
            let idx = local("__strads_idx");
            (
                quote!(Async),
                quote!(run_async_for),
                quote!(#range),
                gen.body_fn(Pass::Run, &idx, quote!(#idx)),
                {
                    // Twice, the same text: the runtime's signature makes one write to
                    // scratch copies (reconnaissance) and one in place (a recorded run).
                    let scratch = gen.body_fn(Pass::Record, &idx, quote!(#idx));
                    let in_place = gen.body_fn(Pass::Record, &idx, quote!(#idx));
                    quote!(#scratch, #in_place)
                },
                gen.body_fn(Pass::Direct, &idx, quote!(#idx)),
                {
                    let window = gen.body_fn(Pass::Window, &idx, quote!(#idx));
                    let lock = gen.body_fn(Pass::Lock, &idx, quote!(#idx));
                    quote!(, #window, #lock)
                },
            )
        }
        Head::Sync {
            data,
            minibatch,
            mode,
        } => {
            let batch = local("__strads_batch");
            let once = quote!(::core::iter::once(#batch));
            let data = borrow(data);
            (
                quote!(Sync),
                quote!(run_sync_for),
                quote!(#data, #minibatch, #mode),
                gen.body_fn(Pass::Note, &batch, once.clone()),
                gen.body_fn(Pass::Record, &batch, once.clone()),
                gen.body_fn(Pass::Direct, &batch, once),
                TokenStream::new(),
            )
        }
    };
    let opts = gen.opts();
    let register = gen.register_fn();
    let run_call = quote! {
        #private::#run_fn(&#site, #head, &#task_var, #opts, #register, #run, #record, #direct #window_lock)
    };
    // Reduction variables take the combined value once the call has run.
    let call = if reductions.is_empty() && summed.is_empty() {
        run_call
    } else {
        let out = local("__strads_out");
        // A scalar reduction is assigned; a capture summed through indexing takes its
        // value through a method that resolves by type (a DDS takes nothing).
        let takes = captures.iter().zip(&gen.names).filter_map(|(c, name)| {
            let span = at(c.span());
            if gen.reduction(name).is_some() {
                Some(quote_spanned!(span=> #c = #task_var.#c.__strads_take(#c);))
            } else if gen.is_summed(name) {
                Some(quote_spanned!(span=> #c.__strads_take_from(&#task_var.#c);))
            } else {
                None
            }
        });
        quote! {
            let #out = #run_call;
            if #out.is_ok() {
                #[allow(unused_imports)]
                use #private::{TakeDds as _, TakeSummed as _};
                #(#takes)*
            }
            #out
        }
    };

    let serde_path = format!("::{}::__private::serde", gen.krate);
    quote! {
        {
            #[derive(#private::serde::Serialize, #private::serde::Deserialize)]
            #[serde(crate = #serde_path)]
            #struct_def
            static #site: #private::CallSite = #private::CallSite {
                kind: #private::LoopKind::#kind,
                task: #task_name,
                body_hash: #body_hash,
                file: ::core::file!(),
                line: ::core::line!(),
                column: ::core::column!(),
                captures: &[#(#names),*],
            };
            let #task_var = #task { #(#inits),* };
            #call
        }
    }
}

/// The function that combines two partials of reduction `r`, written the way the body
/// accumulates (so that its type errors read like the body's).
fn combine_fn(r: &ReductionVar) -> TokenStream {
    let (a, b) = (local("__strads_a"), local("__strads_b"));
    let span = at(r.span);
    match &r.form {
        Form::Op(op) => {
            let assign = match op {
                OpKind::Sum => quote_spanned!(span=> +=),
                OpKind::Product => quote_spanned!(span=> *=),
                OpKind::Or => quote_spanned!(span=> |=),
                OpKind::And => quote_spanned!(span=> &=),
                OpKind::Xor => quote_spanned!(span=> ^=),
            };
            quote_spanned!(span=> |mut #a, #b| { #a #assign #b; #a })
        }
        Form::Method(m) => quote_spanned!(span=> |#a, #b| #a.#m(#b)),
        Form::Call { func, first: true } => quote_spanned!(span=> |#a, #b| #func(#a, #b)),
        Form::Call { func, first: false } => quote_spanned!(span=> |#a, #b| #func(#b, #a)),
        Form::Other => unreachable!("not a reduction"),
    }
}

/// The versions of the body: `Run` over checked views (a plan's tags; `async_for!`),
/// `Note` over checked views that also note the keys a worker writes in its replica
/// (`sync_for!`'s Hybrid workers), `Record` over recording views for reconnaissance execution, `Direct` over views
/// that check only bounds, for a worker that runs a call alone, and (`async_for!` only)
/// `Window` over views that check only a window (a rotation group's block) and `Lock`
/// over views that lock elements, for loops whose accesses change every call.
#[derive(Clone, Copy)]
enum Pass {
    Run,
    Note,
    Record,
    Direct,
    Window,
    Lock,
}

/// What the pieces of the expansion share.
struct Generator<'a> {
    input: &'a Input,
    captures: &'a [Ident],
    /// The captures' names as strings, without `r#`.
    names: Vec<String>,
    /// The name of the strads-ap crate (see [`crate_path`]).
    krate: Ident,
    /// `::KRATE::__private`.
    private: TokenStream,
    /// The task, the first parameter of every generated function.
    t: Ident,
    /// The captures the body accumulates into.
    reductions: &'a [ReductionVar],
    /// The captures the body writes through indexing by sums only (`x[i] += e`): DDSs, or
    /// plain arrays summed element-wise, as their types decide.
    summed: &'a [String],
}

impl<'a> Generator<'a> {
    fn new(
        input: &'a Input,
        krate: Ident,
        captures: &'a [Ident],
        reductions: &'a [ReductionVar],
        summed: &'a [String],
    ) -> Self {
        Generator {
            input,
            captures,
            names: captures.iter().map(|c| c.unraw().to_string()).collect(),
            private: quote!(::#krate::__private),
            krate,
            t: local("__strads_t"),
            reductions,
            summed,
        }
    }

    /// `::KRATE::__private` shown at `span` (for errors about a call through it).
    fn private_at(&self, span: Span) -> TokenStream {
        let krate = Ident::new(&self.krate.to_string(), span);
        quote_spanned!(span=> ::#krate::__private)
    }

    fn is_summed(&self, name: &str) -> bool {
        self.summed.iter().any(|s| s == name)
    }

    /// The reduction of the capture `name`, if the body accumulates into it.
    fn reduction(&self, name: &str) -> Option<&ReductionVar> {
        self.reductions.iter().find(|r| r.name == name)
    }

    /// The user's options converted into `Opts`, or the defaults.
    fn opts(&self) -> TokenStream {
        let private = &self.private;
        match &self.input.opts {
            Some(opts) => {
                let private = self.private_at(at(opts.span()));
                quote_spanned! {at(opts.span())=>
                    ::core::convert::Into::<#private::Opts>::into(#opts)
                }
            }
            None => quote!(#private::Opts::default()),
        }
    }

    /// `|task, registrar| ..`: tells the runtime what kind of value each capture is.
    fn register_fn(&self) -> TokenStream {
        let (private, t) = (&self.private, &self.t);
        let reg = local("__strads_reg");
        let registrations = self.captures.iter().zip(&self.names).map(|(c, name)| {
            let private = self.private_at(at(c.span()));
            quote_spanned! {at(c.span())=>
                (&&&#private::Probe(&#t.#c)).__strads_register(#reg, #name);
            }
        });
        quote! {
            |#t, #reg| {
                #[allow(unused_imports)]
                use #private::{ProbeAgg as _, ProbeNoAgg as _, ProbePlain as _};
                #(#registrations)*
            }
        }
    }

    /// `|task, ctx_or_recorder, arg| { bindings; for PARAM in ITEMS { BODY } }`.
    fn body_fn(&self, pass: Pass, arg: &Ident, items: TokenStream) -> TokenStream {
        let (private, t) = (&self.private, &self.t);
        let (ctx, method, fallback) = match pass {
            Pass::Run => (local("__strads_ctx"), "__strads_enter", "EnterFallback"),
            Pass::Note => (local("__strads_ctx"), "__strads_note", "NoteFallback"),
            Pass::Record => (local("__strads_rec"), "__strads_record", "RecordFallback"),
            Pass::Direct => (local("__strads_ctx"), "__strads_direct", "DirectFallback"),
            Pass::Window => (local("__strads_ctx"), "__strads_window", "DirectFallback"),
            Pass::Lock => (local("__strads_ctx"), "__strads_lock", "LockFallback"),
        };
        // Shown at the capture: a capture that cannot be bound is refused there, by the
        // same error as its capture (so rustc shows it once).
        let method = |c: &Ident| Ident::new(method, at(c.span()));
        let fallback = Ident::new(fallback, Span::call_site());
        let mut commits = Vec::new();
        let bindings = self.captures.iter().zip(&self.names).map(|(c, name)| {
            if let Some(r) = self.reduction(name) {
                // The variable starts from this unit's partial and keeps it at the end.
                let red = local(&format!("__strads_red_{name}"));
                let start = match r.form {
                    Form::Op(OpKind::Sum | OpKind::Or | OpKind::Xor) => quote! {
                        __strads_start_from(#ctx, |_| ::core::default::Default::default())
                    },
                    Form::Op(OpKind::Product) => quote! {
                        __strads_start_from(#ctx, |_| ::core::convert::From::from(1u8))
                    },
                    _ => quote!(__strads_start(#ctx)),
                };
                commits.push(quote!(#red.__strads_commit(#ctx, #c);));
                return quote_spanned! {at(c.span())=>
                    let #red = &#t.#c;
                    let mut #c = #red.#start;
                };
            }
            let slot = local(&format!("__strads_slot_{name}"));
            let method_at_c = method(c);
            if self.is_summed(name) {
                // A summed plain value keeps its partial after the loop; a view does not.
                commits.push(quote!(#slot.__strads_commit();));
            }
            // The slot is a temporary kept alive by the reference, so it needs no `mut`
            // binding whether `__strads_bind` takes `&self` or `&mut self`. `let _ = &c;`
            // keeps a capture that the body does not really use (e.g. one passed to a
            // macro that drops it) from warning.
            quote_spanned! {at(c.span())=>
                let #slot = &mut #t.#c.#method_at_c(#ctx, #name);
                let #c = #slot.__strads_bind();
                let _ = &#c;
            }
        });
        let bindings: Vec<TokenStream> = bindings.collect();
        // A recording body starts each task on its views (they remember the task's last
        // access; see `RecordVectorView::note`), and so does a locking one (its views
        // remember the task's latest first touches; see `LockView::touched`); a plain
        // value has nothing to start.
        let starts: Vec<TokenStream> = match pass {
            Pass::Record | Pass::Lock => self
                .captures
                .iter()
                .zip(&self.names)
                .filter(|(_, name)| self.reduction(name).is_none())
                .map(|(c, _)| quote_spanned!(at(c.span())=> #c.__strads_task();))
                .collect(),
            _ => Vec::new(),
        };
        let body = &self.input.body;
        let each = for_each(
            &body.param,
            body.param_ty.as_ref(),
            &items,
            &body.body,
            &starts,
        );
        // Made in a `const` block, where the enclosing function's variables are out of
        // reach: a variable the body uses but the analysis did not capture (a closure
        // called by name, a name inside a format string) is refused at its use by one
        // resolution error, instead of a type error about the generated function's
        // signature for each of the body's versions. The machine code is the same as a
        // closure made in place (MLR's body: the same size and the same hot loops, at
        // other addresses); benches that moved with this change moved with code placement.
        quote! {
            const {
                |#t, #ctx, #arg| {
                    #[allow(unused_imports)]
                    use #private::{
                        #fallback as _, CommitFallback as _, MapMethods as _, CaptureRefused as _,
                        TaskFallback as _,
                    };
                    #(#bindings)*
                    #each
                    #(#commits)*
                }
            }
        }
    }
}

/// `for PARAM in ITEMS { BODY }`, with the parameter's type annotation, if any, on a
/// `let` inside the loop. The loop makes `continue` in the body skip to the next index
/// or mini-batch, as it does in the serial loop.
/// `starts` run first in each iteration, outside the body's block.
fn for_each(
    param: &Pat,
    param_ty: Option<&Type>,
    items: &TokenStream,
    body: &Expr,
    starts: &[TokenStream],
) -> TokenStream {
    let item = local("__strads_item");
    let block = match body {
        Expr::Block(b) if b.attrs.is_empty() && b.label.is_none() => b.block.to_token_stream(),
        _ => quote!({ #body; }),
    };
    let block = match starts {
        [] => block,
        _ => quote!({ #(#starts)* #block }),
    };
    match param_ty {
        None => quote!(for #param in #items #block),
        Some(ty) => quote! {
            for #item in #items {
                let #param: #ty = #item;
                #block
            }
        },
    }
}

/// `&DATA`, with parentheses where the expression needs them.
fn borrow(data: &Expr) -> TokenStream {
    match data {
        Expr::Array(_)
        | Expr::Block(_)
        | Expr::Call(_)
        | Expr::Field(_)
        | Expr::Index(_)
        | Expr::Lit(_)
        | Expr::Macro(_)
        | Expr::MethodCall(_)
        | Expr::Paren(_)
        | Expr::Path(_)
        | Expr::Reference(_)
        | Expr::Try(_)
        | Expr::Tuple(_)
        | Expr::Unary(_) => quote!(&#data),
        _ => quote!(&(#data)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand_ok(kind: LoopKind, tokens: TokenStream) -> TokenStream {
        match expand(kind, tokens) {
            Ok(tokens) => tokens,
            Err(e) => panic!("unexpected error: {e}"),
        }
    }

    fn sgdmf() -> TokenStream {
        quote! {
            0..ratings.len(), |k| {
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
        }
    }

    /// The generated code with spaces removed, for `contains` checks.
    fn squeeze(tokens: &TokenStream) -> String {
        tokens.to_string().split_whitespace().collect()
    }

    #[test]
    fn generated_code_names_the_crate_by_its_path() {
        let renamed = Ident::new("renamed", Span::call_site());
        let out = expand_in(LoopKind::Async, sgdmf(), renamed).unwrap();
        let s = squeeze(&out);
        assert!(s.contains("::renamed::__private::run_async_for("), "{s}");
        assert!(!s.contains("strads_ap"), "{s}");
        // A crate that does not depend on strads-ap (this one) gets `::strads_ap`.
        assert_eq!(crate_path(), "strads_ap");
    }

    #[test]
    fn fnv1a_reference_values() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn async_for_expansion_parses() {
        let out = expand_ok(LoopKind::Async, sgdmf());
        let block: syn::Block = syn::parse2(out.clone()).expect("a block");
        let expr: syn::Expr = syn::parse2(out.clone()).expect("an expression");
        assert!(matches!(expr, syn::Expr::Block(_)));
        assert_eq!(block.stmts.len(), 4);

        let s = squeeze(&out);
        assert!(s.contains("structLoopTask<"), "{s}");
        assert!(
            s.contains(
                "<__C0,__C1,__C2,__C3,__C4>{ratings:__C0,w:__C1,h:__C2,gamma:__C3,lambda:__C4}"
            ),
            "{s}"
        );
        assert!(s.contains("#[serde(crate=\"::strads_ap::__private::serde\")]"));
        assert!(s.contains("kind:::strads_ap::__private::LoopKind::Async"));
        assert!(s.contains("captures:&[\"ratings\",\"w\",\"h\",\"gamma\",\"lambda\"]"));
        assert!(s.contains("ratings:::strads_ap::__private::capture(&ratings)"));
        assert!(s.contains("::strads_ap::__private::run_async_for(&__STRADS_SITE,0..ratings.len(),&__strads_task,::strads_ap::__private::Opts::default(),"));
        assert!(s.contains(
            "(&&&::strads_ap::__private::Probe(&__strads_t.gamma)).__strads_register(__strads_reg,\"gamma\");"
        ));
        assert!(s.contains(
            "let__strads_slot_w=&mut__strads_t.w.__strads_enter(__strads_ctx,\"w\");letw=__strads_slot_w.__strads_bind();let_=&w;"
        ));
        assert!(
            s.contains("let__strads_slot_h=&mut__strads_t.h.__strads_record(__strads_rec,\"h\");")
        );
        assert!(s.contains("forkin__strads_idx{letr=&ratings[k];"));
        assert!(s.contains("|__strads_t,__strads_rec,__strads_idx|"));
        assert!(s.contains("|__strads_t,__strads_ctx,__strads_idx|"));
    }

    #[test]
    fn task_name_and_hash_agree() {
        let out = expand_ok(LoopKind::Async, sgdmf());
        let s = squeeze(&out);
        let start = s.find("task:\"__StradsTask_").expect("task name") + "task:\"".len();
        let name = &s[start..start + "__StradsTask_".len() + 16];
        let hash = u64::from_str_radix(&name["__StradsTask_".len()..], 16).expect("hex");
        assert!(s.contains("structLoopTask<"), "{s}");
        assert!(s.contains(&format!("body_hash:{hash}u64")));
        // The same body gives the same name; another body another one.
        assert_eq!(
            out.to_string(),
            expand_ok(LoopKind::Async, sgdmf()).to_string()
        );
        let other = squeeze(&expand_ok(
            LoopKind::Async,
            quote!(0..n, |k| {
                w[k] = 0.0;
            }),
        ));
        assert!(!other.contains(name));
    }

    #[test]
    fn options_and_typed_parameter() {
        let out = expand_ok(
            LoopKind::Async,
            quote!(0..n, move |k: usize| x[k] += 1.0, Opts::new().threads(2)),
        );
        syn::parse2::<syn::Block>(out.clone()).expect("a block");
        let s = squeeze(&out);
        assert!(s.contains(
            "::core::convert::Into::<::strads_ap::__private::Opts>::into(Opts::new().threads(2))"
        ));
        assert!(s.contains("for__strads_itemin__strads_idx{letk:usize=__strads_item;{x[k]+=1.0;}}"));
    }

    #[test]
    fn zero_captures() {
        let out = expand_ok(
            LoopKind::Async,
            quote!(0..4, |k| {
                println!("{}", k);
            }),
        );
        syn::parse2::<syn::Block>(out.clone()).expect("a block");
        let s = squeeze(&out);
        assert!(s.contains("structLoopTask{}static"), "{s}");
        assert!(s.contains("captures:&[]"));
    }

    #[test]
    fn sync_for_expansion() {
        let out = expand_ok(
            LoopKind::Sync,
            quote!(
                sentences,
                1000,
                SyncMode::Hybrid,
                |batch| {
                    for s in batch {
                        counts[s.word] += 1;
                    }
                    let n = sentences.len();
                },
                opts
            ),
        );
        syn::parse2::<syn::Block>(out.clone()).expect("a block");
        let s = squeeze(&out);
        assert!(s.contains("kind:::strads_ap::__private::LoopKind::Sync"));
        assert!(s.contains("captures:&[\"counts\",\"sentences\"]"));
        assert!(s.contains(
            "::strads_ap::__private::run_sync_for(&__STRADS_SITE,&sentences,1000,SyncMode::Hybrid,&__strads_task,::core::convert::Into::<::strads_ap::__private::Opts>::into(opts),"
        ), "{s}");
        assert!(s.contains("|__strads_t,__strads_ctx,__strads_batch|"));
        assert!(s.contains("|__strads_t,__strads_rec,__strads_batch|"));
        assert!(s.contains("forbatchin::core::iter::once(__strads_batch){for"));
    }

    #[test]
    fn data_is_parenthesised_when_needed() {
        let s = squeeze(&expand_ok(LoopKind::Sync, quote!(a.b, 10, m, |batch| {})));
        assert!(s.contains("(&__STRADS_SITE,&a.b,10"));
        let s = squeeze(&expand_ok(
            LoopKind::Sync,
            quote!(x as Vec<u8>, 10, m, |batch| {}),
        ));
        assert!(s.contains("(&__STRADS_SITE,&(xasVec<u8>),10"));
    }

    #[test]
    fn expression_body() {
        let out = expand_ok(LoopKind::Async, quote!(0..n, |k| w[k] = k as f32));
        let s = squeeze(&out);
        assert!(s.contains("forkin__strads_idx{w[k]=kasf32;}"), "{s}");
    }

    #[test]
    fn errors_are_returned_not_panicked() {
        let cases = [
            (LoopKind::Async, quote!(0..n)),
            (LoopKind::Async, quote!(0..n, |a, b| {})),
            (LoopKind::Async, quote!(0..n, || {})),
            (LoopKind::Sync, quote!(data, |b| {})),
            (
                LoopKind::Async,
                quote!(0..n, |k| {
                    gamma = 1.0;
                }),
            ),
            (
                LoopKind::Async,
                quote!(0..n, |k| {
                    break;
                }),
            ),
            (
                LoopKind::Async,
                quote!(0..n, |k| {
                    return;
                }),
            ),
            (
                LoopKind::Async,
                quote!(0..n, |k| {
                    f(k)?;
                }),
            ),
            (
                LoopKind::Async,
                quote!(0..n, |k| {
                    self.x[k] = 1;
                }),
            ),
            (LoopKind::Async, quote!(0..n, |k| { let = ; })),
            (LoopKind::Async, quote!(,,)),
        ];
        for (kind, tokens) in cases {
            let error = expand(kind, tokens.clone()).expect_err(&tokens.to_string());
            let compiled = into_compile_error(error);
            assert!(compiled.to_string().contains("compile_error"), "{compiled}");
            syn::parse2::<syn::ExprBlock>(compiled).expect("one block expression");
        }
        let several = expand(
            LoopKind::Async,
            quote!(0..n, |k| {
                gamma = 1.0;
                break;
            }),
        )
        .expect_err("two errors");
        assert_eq!(several.clone().into_iter().count(), 2);
        syn::parse2::<syn::ExprBlock>(into_compile_error(several)).expect("one block");
    }
}
