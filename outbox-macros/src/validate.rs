//! Validation: from the parsed attributes to a checked [`Event`] model: a
//! producer's event, or a type that is only consumed.
//!
//! Each check records its error and carries on, so that one build reports
//! every problem. A model is returned only when no check failed.

use proc_macro2::Span;
use syn::{Expr, ExprLit, ExprUnary, Generics, Ident, Lit, LitInt, LitStr, Member, UnOp};

use crate::attrs::{Body, ContainerAttrs, Input, Key};
use crate::errors::Errors;

/// A struct that passed validation: everything needed to write the impls.
pub(crate) struct Event<'a> {
    /// The struct's name.
    pub(crate) ident: &'a Ident,
    /// The struct's generics, passed through to the impls.
    pub(crate) generics: &'a Generics,
    /// `EVENT_TYPE`: non-empty, no whitespace.
    pub(crate) event_type: LitStr,
    /// `EVENT_VERSION`.
    pub(crate) version: Version,
    /// What a producer needs on top, for `impl ::outbox::Event`; `None` for a
    /// type that is only consumed, which gets `impl ::outbox::EventType` alone.
    pub(crate) producer: Option<Producer<'a>>,
}

/// The producer's half of an event: where and under which aggregate it is
/// published.
pub(crate) struct Producer<'a> {
    /// `AGGREGATE_TYPE`: non-empty.
    pub(crate) aggregate: LitStr,
    /// `TOPIC`: non-empty.
    pub(crate) topic: LitStr,
    /// `SOURCE`: non-empty.
    pub(crate) source: LitStr,
    /// The field whose value `aggregate_id()` returns.
    pub(crate) aggregate_id: AggregateId<'a>,
}

/// The payload schema version, within `1..=i32::MAX`.
pub(crate) struct Version {
    /// The version number.
    pub(crate) value: i32,
    /// Where the user wrote it, or the call site for the default.
    pub(crate) span: Span,
}

/// The field marked `#[event(aggregate_id)]`.
pub(crate) struct AggregateId<'a> {
    /// How to access it on `self`.
    pub(crate) member: Member,
    /// The field as written, for spans.
    pub(crate) field: &'a syn::Field,
}

/// The keys only a producer needs: given together with a field marked
/// `#[event(aggregate_id)]`, or not at all for a type that is only consumed.
const PRODUCER_KEYS: [Key; 3] = [Key::Aggregate, Key::Topic, Key::Source];

/// The hint added to an error about a missing producer key or aggregate id.
const CONSUMER_ONLY_HINT: &str = "or give none of `aggregate`, `topic`, `source` and \
     #[event(aggregate_id)] for a type that is only consumed";

/// Checks `input`, recording every problem in `errors`; returns the model only
/// if all checks passed.
///
/// A struct that gives none of the [`PRODUCER_KEYS`] and marks no field
/// `#[event(aggregate_id)]` is only consumed: it needs `type` alone. Giving
/// any of them makes it a producer's event, which needs them all.
pub(crate) fn validate<'a>(input: &Input<'a>, errors: &mut Errors) -> Option<Event<'a>> {
    let attrs = &input.attrs;
    let produced = is_produced(input);
    let missing_producer_key = check_required(input, produced, errors);
    let event_type = string(attrs, Key::Type, errors);
    let version = version(attrs, errors);
    let producer = if produced {
        let aggregate = string(attrs, Key::Aggregate, errors);
        let topic = string(attrs, Key::Topic, errors);
        let source = string(attrs, Key::Source, errors);
        let aggregate_id = aggregate_id(input, !missing_producer_key, errors);
        Some(Producer {
            aggregate: aggregate?,
            topic: topic?,
            source: source?,
            aggregate_id: aggregate_id?,
        })
    } else {
        None
    };
    Some(Event {
        ident: input.ident,
        generics: input.generics,
        event_type: event_type?,
        version: version?,
        producer,
    })
}

/// Whether the struct gives any of the producer's keys or marks a field
/// `#[event(aggregate_id)]`, and so is meant to be written to the outbox.
fn is_produced(input: &Input<'_>) -> bool {
    let marked = match &input.body {
        Body::Fields(fields) => fields.iter().any(|field| field.aggregate_id.is_some()),
        Body::Unit => false,
    };
    marked || PRODUCER_KEYS.iter().any(|&key| input.attrs.mentioned(key))
}

/// Reports a missing struct-level attribute, or the required keys it lacks:
/// `type`, and for a `produced` struct the [`PRODUCER_KEYS`]. Returns whether
/// a producer key was reported missing (and the consumer-only hint given).
fn check_required(input: &Input<'_>, produced: bool, errors: &mut Errors) -> bool {
    let attrs = &input.attrs;
    let Some(first) = attrs.first else {
        errors.spanned(
            input.ident,
            format_args!(
                "missing #[event(...)] on `{}`: #[derive(Event)] needs \
                 #[event(type = \"...\", aggregate = \"...\", topic = \"...\", source = \"...\")] \
                 and a field marked #[event(aggregate_id)], or just #[event(type = \"...\")] \
                 for a type that is only consumed",
                input.ident
            ),
        );
        return produced;
    };
    if !attrs.complete {
        // A key that seems missing may sit after a syntax error already reported.
        return false;
    }
    let required: &[Key] = if produced {
        &[Key::Type, Key::Aggregate, Key::Topic, Key::Source]
    } else {
        &[Key::Type]
    };
    let missing: Vec<Key> = required
        .iter()
        .copied()
        .filter(|&key| !attrs.mentioned(key))
        .collect();
    let missing_producer_key = missing.iter().any(|key| PRODUCER_KEYS.contains(key));
    let hint = if missing_producer_key {
        format!("; {CONSUMER_ONLY_HINT}")
    } else {
        String::new()
    };
    match missing.as_slice() {
        [] => {}
        [key] => errors.spanned(
            first,
            format_args!(
                "missing `{}` in #[event(...)]: {}{hint}",
                key.name(),
                key.meaning()
            ),
        ),
        keys => {
            let names = keys
                .iter()
                .map(|key| format!("`{}`", key.name()))
                .collect::<Vec<_>>()
                .join(", ");
            let meanings = keys
                .iter()
                .map(|key| format!("`{}` is {}", key.name(), key.meaning()))
                .collect::<Vec<_>>()
                .join("; ");
            errors.spanned(
                first,
                format_args!("missing {names} in #[event(...)]: {meanings}{hint}"),
            );
        }
    }
    missing_producer_key
}

/// The string value of `key`: a non-empty string literal, without whitespace
/// for `type`. `None` if absent (reported by [`check_required`]) or invalid.
fn string(attrs: &ContainerAttrs<'_>, key: Key, errors: &mut Errors) -> Option<LitStr> {
    let written = attrs.get(key)?;
    let Expr::Lit(ExprLit {
        lit: Lit::Str(lit), ..
    }) = ungroup(written)
    else {
        errors.spanned(
            written,
            format_args!(
                "expected a string literal for `{}`, found {}: {}",
                key.name(),
                describe(written),
                key.meaning()
            ),
        );
        return None;
    };
    let value = lit.value();
    if value.trim().is_empty() {
        errors.spanned(
            lit,
            format_args!("`{}` must not be empty: {}", key.name(), key.meaning()),
        );
        return None;
    }
    if key == Key::Type && value.chars().any(char::is_whitespace) {
        errors.spanned(
            lit,
            format_args!(
                "`type` must not contain whitespace, found {value:?}: \
                 use dots or underscores, e.g. `type = \"order.created\"`"
            ),
        );
        return None;
    }
    Some(lit.clone())
}

/// The version: an integer literal in `1..=i32::MAX`, or 1 if absent.
fn version(attrs: &ContainerAttrs<'_>, errors: &mut Errors) -> Option<Version> {
    let Some(written) = attrs.get(Key::Version) else {
        return Some(Version {
            value: 1,
            span: Span::call_site(),
        });
    };
    let expr = ungroup(written);
    let Some((negative, lit)) = integer(expr) else {
        let hint = if matches!(
            expr,
            Expr::Lit(ExprLit {
                lit: Lit::Str(_),
                ..
            })
        ) {
            "; write the number without quotes"
        } else {
            ""
        };
        errors.spanned(
            written,
            format_args!(
                "expected an integer literal for `version`, found {}: {}{hint}",
                describe(written),
                Key::Version.meaning()
            ),
        );
        return None;
    };
    if !matches!(lit.suffix(), "" | "i32") {
        errors.spanned(
            lit,
            format_args!("`version` is an i32: remove the `{}` suffix", lit.suffix()),
        );
        return None;
    }
    let value = lit
        .base10_parse::<i32>()
        .ok()
        .filter(|&value| !negative && value >= 1);
    let Some(value) = value else {
        errors.spanned(
            expr,
            format_args!(
                "`version` must be between 1 and {} (i32::MAX), found {}{}",
                i32::MAX,
                if negative { "-" } else { "" },
                lit.base10_digits()
            ),
        );
        return None;
    };
    Some(Version {
        value,
        span: lit.span(),
    })
}

/// `expr` as an integer literal, possibly negated: `(negative, literal)`.
fn integer(expr: &Expr) -> Option<(bool, &LitInt)> {
    match expr {
        Expr::Lit(ExprLit {
            lit: Lit::Int(lit), ..
        }) => Some((false, lit)),
        Expr::Unary(ExprUnary {
            op: UnOp::Neg(_),
            expr,
            ..
        }) => match ungroup(expr) {
            Expr::Lit(ExprLit {
                lit: Lit::Int(lit), ..
            }) => Some((true, lit)),
            _ => None,
        },
        _ => None,
    }
}

/// The field marked `#[event(aggregate_id)]`, if there is exactly one. The
/// consumer-only hint is added to a missing one when `hint` (that is, when no
/// error about the producer keys carries it already).
fn aggregate_id<'a>(input: &Input<'a>, hint: bool, errors: &mut Errors) -> Option<AggregateId<'a>> {
    let hint = if hint {
        format!("; {CONSUMER_ONLY_HINT}")
    } else {
        String::new()
    };
    let fields = match &input.body {
        Body::Fields(fields) => fields,
        Body::Unit => {
            errors.spanned(
                input.ident,
                format_args!(
                    "#[derive(Event)] needs a struct with fields: \
                     a unit struct has no field to mark #[event(aggregate_id)]{hint}"
                ),
            );
            return None;
        }
    };
    let mut marked = fields
        .iter()
        .filter_map(|field| field.aggregate_id.as_ref().map(|key| (field, key)));
    let Some((first, _)) = marked.next() else {
        errors.spanned(
            input.ident,
            format_args!(
                "no field is marked #[event(aggregate_id)]: mark the one field that identifies \
                 the aggregate; its value is the ordering key and the Kafka message key{hint}"
            ),
        );
        return None;
    };
    let mut unique = true;
    for (_, key) in marked {
        unique = false;
        errors.spanned(
            key,
            format_args!(
                "duplicate #[event(aggregate_id)]: `self.{}` is already the aggregate id; \
                 exactly one field may be marked",
                member_name(&first.member)
            ),
        );
    }
    unique.then(|| AggregateId {
        member: first.member.clone(),
        field: first.original,
    })
}

/// A field's name, or its index in a tuple struct.
fn member_name(member: &Member) -> String {
    match member {
        Member::Named(ident) => ident.to_string(),
        Member::Unnamed(index) => index.index.to_string(),
    }
}

/// `expr` without the invisible groups left by `macro_rules!` substitution.
fn ungroup(mut expr: &Expr) -> &Expr {
    while let Expr::Group(group) = expr {
        expr = &group.expr;
    }
    expr
}

/// What kind of value `expr` is, for error messages.
fn describe(expr: &Expr) -> &'static str {
    match ungroup(expr) {
        Expr::Lit(ExprLit { lit, .. }) => match lit {
            Lit::Str(_) => "a string literal",
            Lit::ByteStr(_) => "a byte string literal",
            Lit::CStr(_) => "a C string literal",
            Lit::Byte(_) => "a byte literal",
            Lit::Char(_) => "a character literal",
            Lit::Int(_) => "an integer literal",
            Lit::Float(_) => "a float literal",
            Lit::Bool(_) => "a boolean",
            _ => "a literal",
        },
        _ => "an expression (only literals are accepted)",
    }
}
