//! Each parameter's place in its module, by id: what an error about a parameter names.

use burn::module::{Module, ModuleVisitor, Param, ParamId};
use burn::tensor::Tensor;
use burn::tensor::backend::Backend;

/// A float parameter's module path (`"encoder.layers.0.fc.weight"`) and shape.
pub(crate) struct ParamPlace {
    pub path: String,
    pub shape: Vec<usize>,
}

/// Every float parameter of `module` with its id, in the module's visit order (so the
/// first parameter an error names is the first in the model).
pub(crate) fn param_places<M: Module<B>, B: Backend>(module: &M) -> Vec<(ParamId, ParamPlace)> {
    let mut visitor = Places {
        stack: Vec::new(),
        places: Vec::new(),
    };
    module.visit(&mut visitor);
    visitor.places
}

struct Places {
    stack: Vec<String>,
    places: Vec<(ParamId, ParamPlace)>,
}

impl<B: Backend> ModuleVisitor<B> for Places {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.stack.push(name.to_string());
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.stack.pop();
    }

    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let path = if self.stack.is_empty() {
            "(the module itself)".to_string()
        } else {
            self.stack.join(".")
        };
        self.places.push((
            param.id,
            ParamPlace {
                path,
                shape: param.shape().as_slice().to_vec(),
            },
        ));
    }
}
