"""The Ray layer, and the only package that imports ray: GPU worker actors (`worker`), the Ray
executor (`executor`) and connecting to a local or remote cluster (`start`)."""
