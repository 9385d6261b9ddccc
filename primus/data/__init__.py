"""Training data: record formats, splitting files into tasks, and feeding records to trainers."""
