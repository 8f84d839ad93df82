//! Parsing the arguments of `async_for!` and `sync_for!`.

use proc_macro2::{Span, TokenStream};
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Error, Expr, ExprClosure, Pat, ReturnType, Token, Type};

/// Which macro is being expanded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LoopKind {
    Async,
    Sync,
}

impl LoopKind {
    /// The macro's name as the user writes it, e.g. `async_for!`.
    pub(crate) fn macro_name(self) -> &'static str {
        match self {
            LoopKind::Async => "async_for!",
            LoopKind::Sync => "sync_for!",
        }
    }

    /// The usual forms of the macro, for error messages.
    pub(crate) fn usage(self) -> &'static str {
        match self {
            LoopKind::Async => {
                "`async_for!(RANGE, |k| BODY)` or `async_for!(RANGE, |k| BODY, OPTS)`"
            }
            LoopKind::Sync => {
                "`sync_for!(DATA, MINIBATCH, MODE, |batch| BODY)` or \
                 `sync_for!(DATA, MINIBATCH, MODE, |batch| BODY, OPTS)`"
            }
        }
    }

    /// What one run of the body covers, for error messages.
    pub(crate) fn unit(self) -> &'static str {
        match self {
            LoopKind::Async => "index",
            LoopKind::Sync => "mini-batch",
        }
    }

    /// How many arguments come before the closure.
    fn leading_args(self) -> usize {
        match self {
            LoopKind::Async => 1,
            LoopKind::Sync => 3,
        }
    }

    fn closure_form(self) -> &'static str {
        match self {
            LoopKind::Async => "|k| BODY",
            LoopKind::Sync => "|batch| BODY",
        }
    }
}

/// The arguments before the closure.
#[allow(clippy::large_enum_variant)] // one value per macro invocation
pub(crate) enum Head {
    Async {
        range: Expr,
    },
    Sync {
        data: Expr,
        minibatch: Expr,
        mode: Expr,
    },
}

/// A parsed `async_for!` or `sync_for!` invocation.
pub(crate) struct Input {
    pub kind: LoopKind,
    pub head: Head,
    pub body: LoopBody,
    pub opts: Option<Expr>,
}

/// The closure `|param| body` (or `|param: Ty| body`, or `move |param| body`).
pub(crate) struct LoopBody {
    /// The parameter's pattern without its type annotation.
    pub param: Pat,
    /// The parameter's type annotation, if any.
    pub param_ty: Option<Type>,
    /// The serial loop body, a block or an expression.
    pub body: Expr,
}

impl Input {
    pub(crate) fn parse(kind: LoopKind, tokens: TokenStream) -> syn::Result<Input> {
        let args = Punctuated::<Expr, Token![,]>::parse_terminated.parse2(tokens)?;
        let args: Vec<Expr> = args.into_iter().collect();
        let lead = kind.leading_args();

        let closure_pos = args.iter().position(|a| matches!(a, Expr::Closure(_)));
        match closure_pos {
            None => {
                let span = args.get(lead).map_or_else(Span::call_site, Spanned::span);
                return Err(Error::new(
                    span,
                    format!(
                        "expected a loop body closure `{}` as argument {} of `{}`; \
                         the forms are {}",
                        kind.closure_form(),
                        lead + 1,
                        kind.macro_name(),
                        kind.usage()
                    ),
                ));
            }
            Some(pos) if pos != lead => {
                let what = match kind {
                    LoopKind::Async => "the index range".to_string(),
                    LoopKind::Sync => "DATA, MINIBATCH and MODE".to_string(),
                };
                return Err(Error::new(
                    args[pos].span(),
                    format!(
                        "`{}` takes {} before the closure; the forms are {}",
                        kind.macro_name(),
                        what,
                        kind.usage()
                    ),
                ));
            }
            Some(_) => {}
        }
        if args.len() > lead + 2 {
            return Err(Error::new(
                args[lead + 2].span(),
                format!(
                    "unexpected argument after the options of `{}`; the forms are {}",
                    kind.macro_name(),
                    kind.usage()
                ),
            ));
        }

        let mut args = args.into_iter();
        let head = match kind {
            LoopKind::Async => Head::Async {
                range: args.next().expect("position checked above"),
            },
            LoopKind::Sync => Head::Sync {
                data: args.next().expect("position checked above"),
                minibatch: args.next().expect("position checked above"),
                mode: args.next().expect("position checked above"),
            },
        };
        let Some(Expr::Closure(closure)) = args.next() else {
            unreachable!("position checked above")
        };
        let body = LoopBody::from_closure(kind, closure)?;
        let opts = args.next();
        Ok(Input {
            kind,
            head,
            body,
            opts,
        })
    }
}

impl LoopBody {
    fn from_closure(kind: LoopKind, closure: ExprClosure) -> syn::Result<LoopBody> {
        let param_name = match kind {
            LoopKind::Async => "the index",
            LoopKind::Sync => "the mini-batch",
        };
        let form = format!("`{}`", kind.closure_form());
        if let Some(asyncness) = closure.asyncness {
            return Err(Error::new(
                asyncness.span,
                format!(
                    "the loop body of `{}` cannot be an async closure; write {}",
                    kind.macro_name(),
                    form
                ),
            ));
        }
        if let Some(movability) = closure.movability {
            return Err(Error::new(
                movability.span,
                format!(
                    "the loop body of `{}` cannot be a `static` closure; write {}",
                    kind.macro_name(),
                    form
                ),
            ));
        }
        if let ReturnType::Type(arrow, ty) = &closure.output {
            let mut tokens = TokenStream::new();
            quote::ToTokens::to_tokens(arrow, &mut tokens);
            quote::ToTokens::to_tokens(ty, &mut tokens);
            return Err(Error::new_spanned(
                tokens,
                format!(
                    "the loop body of `{}` returns nothing; remove the return type and write {}",
                    kind.macro_name(),
                    form
                ),
            ));
        }
        if closure.inputs.len() != 1 {
            let message = format!(
                "the loop body closure of `{}` takes exactly one parameter, {}, \
                 but this one takes {}; write {}",
                kind.macro_name(),
                param_name,
                closure.inputs.len(),
                form
            );
            return Err(if closure.inputs.is_empty() {
                let mut tokens = TokenStream::new();
                quote::ToTokens::to_tokens(&closure.or1_token, &mut tokens);
                quote::ToTokens::to_tokens(&closure.or2_token, &mut tokens);
                Error::new_spanned(tokens, message)
            } else {
                Error::new_spanned(&closure.inputs, message)
            });
        }
        let param = closure.inputs.into_iter().next().expect("length checked");
        let (param, param_ty) = match param {
            Pat::Type(typed) => (*typed.pat, Some(*typed.ty)),
            other => (other, None),
        };
        Ok(LoopBody {
            param,
            param_ty,
            body: *closure.body,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    fn parse(kind: LoopKind, tokens: TokenStream) -> syn::Result<Input> {
        Input::parse(kind, tokens)
    }

    fn message(result: syn::Result<Input>) -> String {
        match result {
            Ok(_) => panic!("expected an error"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn async_forms() {
        let input = parse(
            LoopKind::Async,
            quote!(0..n, |k| {
                w[k] += 1.0;
            }),
        )
        .unwrap();
        assert!(matches!(input.head, Head::Async { .. }));
        assert!(input.opts.is_none());
        assert!(input.body.param_ty.is_none());

        let input = parse(
            LoopKind::Async,
            quote!(0..n, move |k: usize| w[k] += 1.0, Opts::new().threads(2),),
        )
        .unwrap();
        assert!(input.opts.is_some());
        assert!(input.body.param_ty.is_some());
        assert!(matches!(input.body.param, Pat::Ident(_)));
        assert!(matches!(input.body.body, Expr::Binary(_)));
    }

    #[test]
    fn sync_forms() {
        let input = parse(
            LoopKind::Sync,
            quote!(&data, 100, SyncMode::Bsp, |batch| {
                for x in batch {
                    s[0] += x;
                }
            }),
        )
        .unwrap();
        assert!(matches!(input.head, Head::Sync { .. }));
        let input = parse(
            LoopKind::Sync,
            quote!(data, 100, SyncMode::Hybrid, |batch: &[f32]| {}, opts),
        )
        .unwrap();
        assert!(input.opts.is_some());
    }

    #[test]
    fn missing_closure() {
        let m = message(parse(LoopKind::Async, quote!(0..n)));
        assert!(m.contains("expected a loop body closure `|k| BODY`"), "{m}");
        assert!(m.contains("`async_for!(RANGE, |k| BODY)`"), "{m}");
        let m = message(parse(LoopKind::Async, quote!()));
        assert!(m.contains("`async_for!(RANGE, |k| BODY)`"), "{m}");
    }

    #[test]
    fn closure_too_early() {
        let m = message(parse(
            LoopKind::Async,
            quote!(|k| {
                w[k] = 0.0;
            }),
        ));
        assert!(
            m.contains("takes the index range before the closure"),
            "{m}"
        );
        let m = message(parse(LoopKind::Sync, quote!(data, 10, |b| {})));
        assert!(
            m.contains("`sync_for!` takes DATA, MINIBATCH and MODE before the closure"),
            "{m}"
        );
        assert!(
            m.contains("`sync_for!(DATA, MINIBATCH, MODE, |batch| BODY)`"),
            "{m}"
        );
    }

    #[test]
    fn too_many_arguments() {
        let m = message(parse(LoopKind::Async, quote!(0..n, |k| {}, opts, extra)));
        assert!(m.contains("unexpected argument"), "{m}");
    }

    #[test]
    fn wrong_parameter_count() {
        let m = message(parse(LoopKind::Async, quote!(0..n, || {})));
        assert!(m.contains("exactly one parameter, the index"), "{m}");
        assert!(m.contains("takes 0"), "{m}");
        let m = message(parse(LoopKind::Async, quote!(0..n, |i, j| {})));
        assert!(m.contains("takes 2; write `|k| BODY`"), "{m}");
        let m = message(parse(LoopKind::Sync, quote!(d, 1, m, |a, b| {})));
        assert!(m.contains("the mini-batch"), "{m}");
    }

    #[test]
    fn refused_closure_kinds() {
        let m = message(parse(LoopKind::Async, quote!(0..n, async |k| {})));
        assert!(m.contains("async closure"), "{m}");
        let m = message(parse(LoopKind::Async, quote!(0..n, |k| -> u32 { 1 })));
        assert!(m.contains("remove the return type"), "{m}");
    }
}
