//! The Kubernetes exec protocol (websocket channels, `v4.channel.k8s.io` and `v5.channel.k8s.io`)
//! served by running the command as a local process.
