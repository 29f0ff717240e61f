//! burn-amp's Flex kernels as differentiable ops of `Autodiff<Flex, C>`, each with the
//! backward pass it registers: the products and casts (`products`), and the ops around
//! them in a transformer block (`nn`), the elementwise arithmetic (`arithmetic`), a batch norm's statistics (`statistics`). An op that runs here is one node of the graph, its
//! backward pass burn-amp's kernels too, instead of the several nodes of Burn's default
//! decomposition each running Flex's op.

mod arithmetic;
mod conv;
mod layout;
mod nn;
mod node;
mod pool;
mod products;
mod register;
mod statistics;

pub(crate) use arithmetic::{binary, scalar};
pub(crate) use conv::conv;
pub(crate) use layout::{contiguous, swap_dims};
pub(crate) use nn::{gelu, layer_norm, mask_fill, relu, softmax};
pub(crate) use pool::{adaptive_avg_pool2d, max_pool2d};
pub(crate) use products::{cast, linear, matmul};
pub(crate) use statistics::{mean_dim, square};
