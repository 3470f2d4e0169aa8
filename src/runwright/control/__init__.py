"""The control plane: run state machine, controller, executors."""
