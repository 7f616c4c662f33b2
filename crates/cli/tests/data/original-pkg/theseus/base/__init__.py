"""Base types: chips, hardware, topology, execution spec."""
