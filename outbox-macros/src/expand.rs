//! Expansion: from a validated [`Event`] model to the `impl ::outbox::EventType`
//! and, for a producer's event, the `impl ::outbox::Event`.

use proc_macro2::{Literal, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{DeriveInput, Index, Member};

use crate::attrs::Input;
use crate::errors::Errors;
use crate::validate::{Event, Producer, validate};

/// Runs the three stages on `node`: parse, validate, expand.
///
/// # Errors
/// Returns every problem found in `node`, combined into one [`syn::Error`].
pub(crate) fn derive(node: &DeriveInput) -> syn::Result<TokenStream> {
    let mut errors = Errors::default();
    let input = Input::from_syn(node, &mut errors)?;
    let event = validate(&input, &mut errors);
    errors.finish()?;
    match event {
        Some(event) => Ok(expand(&event)),
        None => Err(syn::Error::new_spanned(
            &node.ident,
            "internal error in #[derive(Event)]: validation failed without reporting why; \
             please file a bug",
        )),
    }
}

/// Writes the impl of `::outbox::EventType` for a validated struct, and that
/// of `::outbox::Event` if it is a producer's event.
fn expand(event: &Event<'_>) -> TokenStream {
    let Event {
        ident,
        generics,
        event_type,
        version,
        producer,
    } = event;
    let (impl_generics, ty_generics, where_clause) = generics.split_for_impl();
    let mut version_literal = Literal::i32_unsuffixed(version.value);
    version_literal.set_span(version.span);
    let event_impl = producer.as_ref().map(|producer| {
        let Producer {
            aggregate,
            topic,
            source,
            aggregate_id,
        } = producer;
        // Spanned at the field's type, so that a type without `Display` is
        // reported there.
        let span = aggregate_id.field.ty.span();
        let member = match &aggregate_id.member {
            Member::Named(ident) => {
                let mut ident = ident.clone();
                ident.set_span(span);
                Member::Named(ident)
            }
            Member::Unnamed(index) => Member::Unnamed(Index {
                index: index.index,
                span,
            }),
        };
        let aggregate_id_body = quote_spanned! {span=>
            ::std::string::ToString::to_string(&self.#member)
        };
        quote! {
            #[automatically_derived]
            impl #impl_generics ::outbox::Event for #ident #ty_generics #where_clause {
                const SOURCE: &'static str = #source;
                const AGGREGATE_TYPE: &'static str = #aggregate;
                const TOPIC: &'static str = #topic;

                fn aggregate_id(&self) -> ::std::string::String {
                    #aggregate_id_body
                }
            }
        }
    });
    quote! {
        #[automatically_derived]
        impl #impl_generics ::outbox::EventType for #ident #ty_generics #where_clause {
            const EVENT_TYPE: &'static str = #event_type;
            const EVENT_VERSION: i32 = #version_literal;
        }
        #event_impl
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn derive_str(input: DeriveInput) -> Result<String, Vec<String>> {
        derive(&input)
            .map(|tokens| tokens.to_string())
            .map_err(|error| error.into_iter().map(|e| e.to_string()).collect())
    }

    #[test]
    fn expands_to_an_impl_with_the_constants() {
        let expanded = derive_str(syn::parse_quote! {
            #[event(type = "order.created", version = 2, aggregate = "order", topic = "orders", source = "/orders")]
            struct OrderCreated<T> where T: Clone {
                #[event(aggregate_id)]
                order_id: u64,
                extra: T,
            }
        })
        .expect("a valid event expands");
        let expected = quote! {
            #[automatically_derived]
            impl<T> ::outbox::EventType for OrderCreated<T> where T: Clone {
                const EVENT_TYPE: &'static str = "order.created";
                const EVENT_VERSION: i32 = 2;
            }
            #[automatically_derived]
            impl<T> ::outbox::Event for OrderCreated<T> where T: Clone {
                const SOURCE: &'static str = "/orders";
                const AGGREGATE_TYPE: &'static str = "order";
                const TOPIC: &'static str = "orders";

                fn aggregate_id(&self) -> ::std::string::String {
                    ::std::string::ToString::to_string(&self.order_id)
                }
            }
        };
        assert_eq!(expanded, expected.to_string());
    }

    #[test]
    fn a_type_only_consumed_gets_only_the_event_type() {
        let expanded = derive_str(syn::parse_quote! {
            #[event(type = "order.created", version = 2)]
            struct OrderCreated<T> where T: Clone {
                order_id: i64,
                extra: T,
            }
        })
        .expect("a consumer-only event expands");
        let expected = quote! {
            #[automatically_derived]
            impl<T> ::outbox::EventType for OrderCreated<T> where T: Clone {
                const EVENT_TYPE: &'static str = "order.created";
                const EVENT_VERSION: i32 = 2;
            }
        };
        assert_eq!(expanded, expected.to_string());

        let unit = derive_str(syn::parse_quote! {
            #[event(type = "clock.ticked")]
            struct ClockTicked;
        })
        .expect("a consumer-only unit struct expands");
        assert!(
            unit.contains("const EVENT_VERSION : i32 = 1 ;")
                && !unit.contains(":: outbox :: Event for"),
            "{unit}"
        );
    }

    #[test]
    fn some_producer_keys_need_all_of_them() {
        let hint = "or give none of `aggregate`, `topic`, `source` and #[event(aggregate_id)] \
                    for a type that is only consumed";
        let errors = derive_str(syn::parse_quote! {
            #[event(type = "a.b", topic = "t")]
            struct E { id: u64 }
        })
        .expect_err("a partial producer");
        assert_eq!(errors.len(), 2, "{errors:#?}");
        assert!(
            errors[0].starts_with("missing `aggregate`, `source` in #[event(...)]")
                && errors[0].ends_with(hint),
            "{errors:#?}"
        );
        assert!(
            errors[1].starts_with("no field is marked") && !errors[1].contains(hint),
            "the hint is given once: {errors:#?}"
        );

        let errors = derive_str(syn::parse_quote! {
            #[event(type = "a.b")]
            struct E { #[event(aggregate_id)] id: u64 }
        })
        .expect_err("an aggregate id without the keys");
        assert_eq!(errors.len(), 1, "{errors:#?}");
        assert!(
            errors[0].starts_with("missing `aggregate`, `topic`, `source`")
                && errors[0].ends_with(hint),
            "{errors:#?}"
        );

        let errors = derive_str(syn::parse_quote! {
            #[event(type = "a.b", aggregate = "a", topic = "t", source = "/s")]
            struct E { id: u64 }
        })
        .expect_err("every key without an aggregate id");
        assert_eq!(errors.len(), 1, "{errors:#?}");
        assert!(
            errors[0].starts_with("no field is marked") && errors[0].ends_with(hint),
            "{errors:#?}"
        );
    }

    #[test]
    fn a_type_only_consumed_still_needs_its_type() {
        let errors = derive_str(syn::parse_quote! {
            #[event(version = 2)]
            struct E { id: u64 }
        })
        .expect_err("no type");
        assert_eq!(errors.len(), 1, "{errors:#?}");
        assert!(
            errors[0].starts_with("missing `type` in #[event(...)]")
                && !errors[0].contains("or give none"),
            "{errors:#?}"
        );
    }

    #[test]
    fn version_defaults_to_one_and_tuple_fields_are_indexed() {
        let expanded = derive_str(syn::parse_quote! {
            #[event(type = "a.b", aggregate = "a", topic = "t", source = "/s")]
            struct E(String, #[event(aggregate_id)] u64);
        })
        .expect("a valid event expands");
        assert!(
            expanded.contains("const EVENT_VERSION : i32 = 1 ;"),
            "{expanded}"
        );
        assert!(expanded.contains("& self . 1"), "{expanded}");
    }

    #[test]
    fn all_errors_are_reported_together() {
        let errors = derive_str(syn::parse_quote! {
            #[event(type = "a b", version = 0, nope = 1, topic = "")]
            struct E {
                #[event(key)]
                id: u64,
            }
        })
        .expect_err("many errors");
        let expected = [
            "unknown key `nope`",
            "unknown key `key`",
            "missing `aggregate`, `source`",
            "`type` must not contain whitespace",
            "`version` must be between 1",
            "`topic` must not be empty",
            "no field is marked",
        ];
        assert_eq!(errors.len(), expected.len(), "{errors:#?}");
        for (error, start) in errors.iter().zip(expected) {
            assert!(error.starts_with(start), "{errors:#?}");
        }
    }
}
