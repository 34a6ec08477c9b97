//! Parsing: `#[event(...)]` attributes into an intermediate representation.
//!
//! This stage checks syntax only: which keys appear, that none is unknown and
//! none repeated. Values are kept as the user's own [`syn::Expr`]s, spans
//! intact, for [`crate::validate`] to judge.

use proc_macro2::TokenTree;
use syn::meta::ParseNestedMeta;
use syn::{Attribute, Data, DeriveInput, Expr, Fields, Generics, Ident, Member, Meta, Path, Token};

use crate::errors::Errors;

/// The name of the attribute, on the struct and on its fields.
const ATTR: &str = "event";

/// The field attribute key marking the aggregate id.
const AGGREGATE_ID: &str = "aggregate_id";

/// A key of the struct-level `#[event(...)]`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Key {
    /// `type = "order.created"`
    Type,
    /// `version = 1`
    Version,
    /// `aggregate = "order"`
    Aggregate,
    /// `topic = "orders"`
    Topic,
    /// `source = "/orders"`
    Source,
}

impl Key {
    /// Every key, in documentation order.
    pub(crate) const ALL: [Key; 5] = [
        Key::Type,
        Key::Version,
        Key::Aggregate,
        Key::Topic,
        Key::Source,
    ];

    /// The key as written in the attribute.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Key::Type => "type",
            Key::Version => "version",
            Key::Aggregate => "aggregate",
            Key::Topic => "topic",
            Key::Source => "source",
        }
    }

    /// What the key means, for error messages.
    pub(crate) fn meaning(self) -> &'static str {
        match self {
            Key::Type => "the CloudEvents type, e.g. `type = \"order.created\"`",
            Key::Version => "the payload schema version, e.g. `version = 1`",
            Key::Aggregate => {
                "the kind of entity the event belongs to, e.g. `aggregate = \"order\"`"
            }
            Key::Topic => {
                "the Kafka topic or RabbitMQ exchange to publish to, e.g. `topic = \"orders\"`"
            }
            Key::Source => "the CloudEvents source, e.g. `source = \"/orders\"`",
        }
    }

    /// The key named by `path`, if any.
    fn from_path(path: &Path) -> Option<Key> {
        Key::ALL.into_iter().find(|key| path.is_ident(key.name()))
    }
}

/// Everything found in the struct-level `#[event(...)]` attributes.
#[derive(Default)]
pub(crate) struct ContainerAttrs<'a> {
    /// The first `#[event(...)]` on the struct, where missing keys are reported;
    /// `None` if there is none.
    pub(crate) first: Option<&'a Attribute>,
    /// `false` if some attribute could not be parsed to its end, in which case
    /// keys that seem missing may just not have been reached.
    pub(crate) complete: bool,
    /// The value given to each key, as written and unchecked, indexed by [`Key`].
    values: [Option<Expr>; Key::ALL.len()],
    /// Whether each key was written at all, even without a valid value.
    mentioned: [bool; Key::ALL.len()],
}

impl ContainerAttrs<'_> {
    /// The value given to `key`, if any.
    pub(crate) fn get(&self, key: Key) -> Option<&Expr> {
        self.values[key as usize].as_ref()
    }

    /// Whether `key` was written, even if its value could not be parsed; a key
    /// that was not is missing.
    pub(crate) fn mentioned(&self, key: Key) -> bool {
        self.mentioned[key as usize]
    }
}

/// A field of the struct.
pub(crate) struct Field<'a> {
    /// How to access the field on `self`: a name, or a tuple index.
    pub(crate) member: Member,
    /// The field as written.
    pub(crate) original: &'a syn::Field,
    /// The `aggregate_id` key of `#[event(aggregate_id)]`, if present.
    pub(crate) aggregate_id: Option<Path>,
}

/// The shape of the struct.
pub(crate) enum Body<'a> {
    /// A struct with named or tuple fields (possibly none).
    Fields(Vec<Field<'a>>),
    /// A unit struct, `struct Foo;`.
    Unit,
}

/// The derive input, with its attributes parsed.
pub(crate) struct Input<'a> {
    /// The struct's name.
    pub(crate) ident: &'a Ident,
    /// The struct's generics, passed through to the impl.
    pub(crate) generics: &'a Generics,
    /// The struct-level `#[event(...)]`.
    pub(crate) attrs: ContainerAttrs<'a>,
    /// The fields.
    pub(crate) body: Body<'a>,
}

impl<'a> Input<'a> {
    /// Parses `node`, recording recoverable problems in `errors`.
    ///
    /// # Errors
    /// Fails right away, without looking at attributes, when `node` is not a
    /// struct.
    pub(crate) fn from_syn(node: &'a DeriveInput, errors: &mut Errors) -> syn::Result<Self> {
        let fields = match &node.data {
            Data::Struct(data) => &data.fields,
            Data::Enum(data) => {
                return Err(syn::Error::new_spanned(
                    data.enum_token,
                    "#[derive(Event)] does not support enums: derive it on one struct per event type",
                ));
            }
            Data::Union(data) => {
                return Err(syn::Error::new_spanned(
                    data.union_token,
                    "#[derive(Event)] does not support unions: derive it on a struct",
                ));
            }
        };
        let attrs = parse_container_attrs(&node.attrs, errors);
        let body = match fields {
            Fields::Unit => Body::Unit,
            Fields::Named(_) | Fields::Unnamed(_) => Body::Fields(
                fields
                    .iter()
                    .zip(fields.members())
                    .map(|(original, member)| Field {
                        member,
                        original,
                        aggregate_id: parse_field_attrs(&original.attrs, errors),
                    })
                    .collect(),
            ),
        };
        Ok(Input {
            ident: &node.ident,
            generics: &node.generics,
            attrs,
            body,
        })
    }
}

/// Parses every `#[event(...)]` on the struct.
fn parse_container_attrs<'a>(attrs: &'a [Attribute], errors: &mut Errors) -> ContainerAttrs<'a> {
    let mut parsed = ContainerAttrs {
        complete: true,
        ..ContainerAttrs::default()
    };
    for attr in attrs.iter().filter(|attr| attr.path().is_ident(ATTR)) {
        parsed.first.get_or_insert(attr);
        if !is_list(attr, errors, EXPECTED_CONTAINER) {
            parsed.complete = false;
            continue;
        }
        let result = attr.parse_nested_meta(|meta| {
            let Some(key) = Key::from_path(&meta.path) else {
                errors.spanned(&meta.path, unknown_container_key(&meta.path));
                return skip_value(&meta);
            };
            parsed.mentioned[key as usize] = true;
            if !meta.input.peek(Token![=]) {
                errors.spanned(
                    &meta.path,
                    format_args!("expected `=` after `{}`: {}", key.name(), key.meaning()),
                );
                return skip_value(&meta);
            }
            let value: Expr = meta.value()?.parse()?;
            let slot = &mut parsed.values[key as usize];
            if slot.is_some() {
                errors.spanned(
                    &meta.path,
                    format_args!("duplicate `{}` in #[event(...)]", key.name()),
                );
            } else {
                *slot = Some(value);
            }
            Ok(())
        });
        if let Err(error) = result {
            errors.push(error);
            parsed.complete = false;
        }
    }
    parsed
}

/// Parses every `#[event(...)]` on a field, returning the `aggregate_id` key if
/// one of them marks the field as the aggregate id.
fn parse_field_attrs(attrs: &[Attribute], errors: &mut Errors) -> Option<Path> {
    let mut aggregate_id: Option<Path> = None;
    for attr in attrs.iter().filter(|attr| attr.path().is_ident(ATTR)) {
        if !is_list(attr, errors, EXPECTED_FIELD) {
            continue;
        }
        let result = attr.parse_nested_meta(|meta| {
            if !meta.path.is_ident(AGGREGATE_ID) {
                errors.spanned(&meta.path, unknown_field_key(&meta.path));
                return skip_value(&meta);
            }
            if !meta.input.is_empty() && !meta.input.peek(Token![,]) {
                errors.spanned(
                    &meta.path,
                    "`aggregate_id` takes no value: write #[event(aggregate_id)]",
                );
                skip_value(&meta)?;
            }
            if aggregate_id.is_some() {
                errors.spanned(&meta.path, "duplicate `aggregate_id` on this field");
            } else {
                aggregate_id = Some(meta.path);
            }
            Ok(())
        });
        if let Err(error) = result {
            errors.push(error);
        }
    }
    aggregate_id
}

/// How the struct-level attribute is written.
const EXPECTED_CONTAINER: &str = "expected #[event(type = \"...\", aggregate = \"...\", topic = \"...\", source = \"...\")] on the struct, \
     or #[event(type = \"...\")] for a type that is only consumed";

/// How the field-level attribute is written.
const EXPECTED_FIELD: &str = "expected #[event(aggregate_id)] on the field";

/// Whether `attr` has the `#[event(...)]` form; records an error if not.
fn is_list(attr: &Attribute, errors: &mut Errors, expected: &str) -> bool {
    match &attr.meta {
        Meta::List(_) => true,
        Meta::Path(_) | Meta::NameValue(_) => {
            errors.spanned(attr, expected);
            false
        }
    }
}

/// Skips the rest of a nested meta item, up to the next top-level comma, so
/// that parsing can continue after an error has been recorded for it.
fn skip_value(meta: &ParseNestedMeta<'_>) -> syn::Result<()> {
    meta.input.step(|cursor| {
        let mut rest = *cursor;
        while let Some((tree, next)) = rest.token_tree() {
            if let TokenTree::Punct(punct) = &tree
                && punct.as_char() == ','
            {
                break;
            }
            rest = next;
        }
        Ok(((), rest))
    })
}

/// The error message for an unknown struct-level key.
fn unknown_container_key(path: &Path) -> String {
    let name = path_to_string(path);
    if path.is_ident(AGGREGATE_ID) {
        return format!(
            "`{AGGREGATE_ID}` belongs on a field, not on the struct: \
             put #[event({AGGREGATE_ID})] on the field holding the aggregate id"
        );
    }
    let valid = Key::ALL.map(|key| format!("`{}`", key.name())).join(", ");
    format!("unknown key `{name}` in #[event(...)]: expected one of {valid}")
}

/// The error message for an unknown field-level key.
fn unknown_field_key(path: &Path) -> String {
    let name = path_to_string(path);
    let hint = if Key::from_path(path).is_some() {
        format!("; `{name}` belongs in the #[event(...)] on the struct")
    } else {
        String::new()
    };
    format!(
        "unknown key `{name}` in field #[event(...)]: the only field key is `{AGGREGATE_ID}`{hint}"
    )
}

/// `path` as written, e.g. `a::b`.
fn path_to_string(path: &Path) -> String {
    let segments = path
        .segments
        .iter()
        .map(|segment| segment.ident.to_string())
        .collect::<Vec<_>>()
        .join("::");
    if path.leading_colon.is_some() {
        format!("::{segments}")
    } else {
        segments
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(input: DeriveInput) -> (Option<Input<'static>>, Errors) {
        let node: &'static DeriveInput = Box::leak(Box::new(input));
        let mut errors = Errors::default();
        let parsed = Input::from_syn(node, &mut errors).ok();
        (parsed, errors)
    }

    #[test]
    fn keys_round_trip_through_their_names() {
        for key in Key::ALL {
            let path = Path::from(Ident::new(key.name(), proc_macro2::Span::call_site()));
            assert_eq!(Key::from_path(&path), Some(key));
        }
    }

    #[test]
    fn keys_split_over_attributes_are_merged() {
        let (input, errors) = parse(syn::parse_quote! {
            #[event(type = "a.b", topic = "t")]
            #[event(aggregate = "a", source = "/s")]
            struct E(#[event(aggregate_id)] u64);
        });
        assert!(errors.finish().is_ok());
        let input = input.expect("a struct parses");
        assert!(input.attrs.complete);
        assert!(
            Key::ALL
                .iter()
                .all(|&key| key == Key::Version || input.attrs.get(key).is_some())
        );
        let Body::Fields(fields) = &input.body else {
            panic!("a tuple struct has fields");
        };
        assert!(fields[0].aggregate_id.is_some());
    }

    #[test]
    fn parsing_goes_on_after_an_unknown_key() {
        let (input, errors) = parse(syn::parse_quote! {
            #[event(name(x, y) = 3, type = "a.b", type = "c.d")]
            struct E;
        });
        let error = errors.finish().expect_err("an unknown and a duplicate key");
        assert_eq!(error.into_iter().count(), 2);
        let input = input.expect("a struct parses");
        assert!(input.attrs.complete);
        assert!(input.attrs.get(Key::Type).is_some());
    }
}
