"""Checks of images and nodes, parametrised from an image lock: expected versions come from the lock and the catalog."""
