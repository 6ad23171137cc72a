"""Old module paths of the bundled dynamic providers, kept for stacks deployed by earlier releases.

Pulumi stores a dynamic resource's provider in the stack's state, pickled by module path, and uses
that stored provider to read, update and delete the resource. Earlier releases kept the providers
here; they now live in `components/providers/` (engine code), and the code that runs on nodes in
`components/node/`. Each module here only re-exports provider classes under their old paths (proven
by tests/test_engine_upgrade.py with a stack deployed before the move): never add code here.
"""
