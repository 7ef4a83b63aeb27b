//! libclang inspection of annotated CUDA sources (being written).
