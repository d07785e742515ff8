//! What icecache knows of the Iceberg REST catalog: which operation a request is and what it
//! names (`route`), how tables are named exactly and loosely (`names`), what a write touches
//! (`writes`), the `/v1/config` answer that keeps clients on icecache (`config_rewrite`), the
//! operations a catalog says it serves (`endpoints`), and what a lenient catalog may read a path
//! as (`lenient`).

pub mod config_rewrite;
pub mod endpoints;
pub mod lenient;
pub mod names;
pub mod route;
pub mod writes;
