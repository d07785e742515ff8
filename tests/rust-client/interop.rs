//! Nothing here: the interop tests are in tests/.
