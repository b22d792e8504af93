//! DT core
