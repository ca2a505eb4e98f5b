//! (backend under construction)
