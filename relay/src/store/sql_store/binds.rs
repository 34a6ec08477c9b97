//! The values of one call, named by [`Param`], and how they become the
//! arguments of a [`Statement`] in the order its placeholders take them.

use sqlx::error::BoxDynError;
use sqlx::{Arguments, Database, Encode, Type};

use super::statements::{Param, Statement};

/// A value ready to bind on `DB`, whatever its Rust type.
pub trait BindValue<DB: Database>: Send + Sync {
    /// Append the value to `arguments`.
    fn add_to(&self, arguments: &mut DB::Arguments) -> Result<(), BoxDynError>;
}

impl<DB, T> BindValue<DB> for T
where
    DB: Database,
    T: for<'t> Encode<'t, DB> + Type<DB> + Send + Sync,
{
    fn add_to(&self, arguments: &mut DB::Arguments) -> Result<(), BoxDynError> {
        arguments.add(self)
    }
}

/// A value of any type `DB` binds.
pub type Bound<DB> = Box<dyn BindValue<DB>>;

/// The values of one call, each named by what it is.
pub struct Values<DB: Database> {
    values: Vec<(Param, Bound<DB>)>,
}

impl<DB: Database> Values<DB> {
    /// No values yet.
    pub fn new() -> Self {
        Values { values: Vec::new() }
    }

    /// Add `value` as `param`.
    pub fn with(mut self, param: Param, value: Bound<DB>) -> Self {
        self.values.push((param, value));
        self
    }

    /// The arguments of `statement`: the value of each of its params, in
    /// its order. Values the statement does not take are left out.
    ///
    /// # Errors
    /// [`sqlx::Error::Encode`] when the statement takes a value the call
    /// does not give, or a value fails to encode.
    pub fn arguments(&self, statement: &Statement) -> Result<DB::Arguments, sqlx::Error> {
        let mut arguments = DB::Arguments::default();
        for param in statement.params {
            let (_, value) = self
                .values
                .iter()
                .find(|(given, _)| given == param)
                .ok_or_else(|| {
                    sqlx::Error::Encode(format!("no value given for parameter {param:?}").into())
                })?;
            value.add_to(&mut arguments).map_err(sqlx::Error::Encode)?;
        }
        Ok(arguments)
    }
}
