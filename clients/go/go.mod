module github.com/spillway-rs/spillway/clients/go

go 1.19
