pub(crate) fn all(
    _b: &super::FakeBackend,
) -> Vec<(&'static str, leasehold_conformance::ExtraTest)> {
    Vec::new()
}
