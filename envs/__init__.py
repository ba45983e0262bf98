"""The environment suite: text environments registered with Gymnasium under the `gspo` namespace."""
