//! The macros every behaviour and backend-specific test uses. They name
//! everything by absolute path, so they work whatever the caller imports.

/// Returns `Err(format!(...))` from the enclosing test unless `cond` holds.
///
/// ```
/// fn check(n: u32) -> Result<(), String> {
///     leasehold_conformance::ensure!(n < 4, "{n} is not below 4");
///     Ok(())
/// }
/// assert_eq!(check(5), Err("5 is not below 4".to_owned()));
/// ```
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return ::core::result::Result::Err(::std::format!($($fmt)+));
        }
    };
}

/// Registers backend-specific tests on a [`Target`](crate::Target), each
/// under its function's name: `trials!(target; test_a, test_b)` is
/// `target.with_test("test_a", test_a).with_test("test_b", test_b)`. Each
/// test is an `async fn(Arc<B>) -> Outcome` over the target's concrete
/// backend type `B` and is run with the backend the target was built with.
#[macro_export]
macro_rules! trials {
    ($target:expr; $($test:ident),* $(,)?) => {
        $target $(.with_test(::core::stringify!($test), $test))*
    };
}
