"""Process plumbing shared by the layers above: logging, metrics, the webhook server's wiring."""
